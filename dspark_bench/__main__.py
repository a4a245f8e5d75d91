from dspark_bench.cli import main

raise SystemExit(main())
