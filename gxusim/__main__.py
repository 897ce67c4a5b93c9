import sys

from gxusim.cli import main

sys.exit(main())
