"""The extraction worker: archives turns as episodes (subscription `turns-extraction`)."""
