"""The in-process host: the ``Runtime`` every front end drives, and its assembly from options."""
