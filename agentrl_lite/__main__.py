"""`python -m agentrl_lite` is the `agentrl-lite` command."""

import sys

from agentrl_lite.course.cli import main

sys.exit(main())
