"""Small text helpers shared by the domain code and the CLI."""


def clip(text: str, width: int = 110) -> str:
    """One line of at most width characters (an ellipsis marks a cut)."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
