"""``python -m spfcore.cli``: the ``spfcore`` command."""

import sys

from spfcore.cli import main

sys.exit(main())
