"""`nb train`: configuration, data pipeline, attention guidance, initialisations and the training loop.

Which options apply to which task is one table, `nbcli.train.task_options`.
Import the pieces from their modules (`nbcli.train.loop.train`, `nbcli.train.config.build_config`);
this package does no work at import time.
"""
