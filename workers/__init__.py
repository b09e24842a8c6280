"""Workers: the training engine (torch), the probes, and the Celery task that runs them."""
