"""A command verifier that always crashes (exit 2): a verifier fault, never the agent's."""

import sys

sys.stderr.write("verifier: simulated crash\n")
sys.exit(2)
