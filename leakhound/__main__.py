from leakhound.cli import main

main()
