"""`nb train`: configuration, data pipeline, attention guidance, initialisations and the training loop.

The orchestration every task runs on is `nbcli.train.loop.run_training`; the update loop
`nbcli.train.updates`, its callbacks `nbcli.train.callbacks`. Import the pieces from their modules;
this package does no work at import time.
"""
