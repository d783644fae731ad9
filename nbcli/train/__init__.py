"""`nb train`: configuration, data pipeline, attention guidance, initialisations and the training loop.

Import the pieces from their modules (`nbcli.train.loop.train`, `nbcli.train.config.build_config`);
this package does no work at import time.
"""
