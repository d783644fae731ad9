"""Experiment trackers (`nb train --track tensorboard|wandb|mlflow`), each through its own client
library, imported only when asked for:

    base.py                 the Tracker protocol (start, log, finish, where), settings, the client table
    session.py              a run's trackers together: started before training, a failure mid-run warned once
    tensorboard_tracker.py  torch.utils.tensorboard's SummaryWriter (event files)
    wandb_tracker.py        wandb (online, or offline files for `wandb sync`)
    mlflow_tracker.py       mlflow's MlflowClient (a tracking server, or a local store)

A new tracker is a class with those four methods and a row in `base.CLIENTS`.
"""

from nbcli.trackers.base import CLIENTS, Tracker, TrackerSettings, check_settings, load_trackers, parse_names
from nbcli.trackers.session import TrackingSession, previous_runs, run_config

__all__ = ["CLIENTS", "Tracker", "TrackerSettings", "TrackingSession", "check_settings", "load_trackers",
           "parse_names", "previous_runs", "run_config"]
