"""The functions-framework entry point:

    functions-framework --source function/main.py --target handle --signature-type http

`handle` is podsweeper's HTTP function, built once from the PODSWEEPER_* environment
(invalid configuration fails the server's start).
"""

from podsweeper.service import Service
from podsweeper.web import make_handler

handle = make_handler(Service.from_environment())
