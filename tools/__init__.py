"""Tools of the repository, not of the installed package: the client's generators
(`make client`)."""
