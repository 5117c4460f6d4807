"""provision: NVIDIA GPU hosts and images from one explainable compatibility plan."""

__version__ = "0.1.0"
