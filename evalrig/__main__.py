from evalrig.cli import main

main()
