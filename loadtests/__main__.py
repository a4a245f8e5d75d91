from loadtests.cli import main

raise SystemExit(main())
