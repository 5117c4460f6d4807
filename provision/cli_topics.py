"""Names shared by the CLI and the commands, kept import-free for start-up speed."""

TOPICS = ("gpus", "os", "drivers", "cuda", "cudnn", "frameworks", "images")
