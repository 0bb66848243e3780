from leakhound._entry import main

main()
