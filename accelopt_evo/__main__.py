"""`python -m accelopt_evo`."""

import sys

from .cli import main

sys.exit(main())
