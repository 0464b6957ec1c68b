from lookahead_reasoning.cli.app import main

main()
