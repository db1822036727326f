"""evalrig: the evaluation rig behind eval.sh (see DESIGN.md)."""

__version__ = "0.1.0"
