"""Developer tools shipped with the CLI, outside the decision path (`podsweeper record`)."""
