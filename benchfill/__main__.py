import sys

from benchfill.cli import main

sys.exit(main())
