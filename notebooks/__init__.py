"""Phase notebooks (jupytext percent scripts), their runner, and the analysis code they share."""
