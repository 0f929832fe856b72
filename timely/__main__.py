"""``python -m timely`` is the ``timely`` command."""

import sys

from timely.cli import main

sys.exit(main())
