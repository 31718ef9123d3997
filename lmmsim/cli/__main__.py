import sys

from lmmsim.cli import main

sys.exit(main())
