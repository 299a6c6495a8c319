"""`python -m agentrl_lite` is the `agentrl-lite` command."""

import sys

from agentrl_lite.cli import main

sys.exit(main())
