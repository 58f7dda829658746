"""`python -m accelopt_evo`."""

import sys

from accelopt_evo.cli.main import main

sys.exit(main())
