import sys

from kubectl_priogate.main import main

sys.exit(main())
