"""evalrig: the evaluation rig behind eval.sh (README.md; the contract in docs/)."""

__version__ = "0.1.0"
