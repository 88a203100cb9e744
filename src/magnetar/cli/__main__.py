"""``python -m magnetar.cli``: the same as the ``magnetar`` console script."""

from magnetar.cli.main import main

main()
