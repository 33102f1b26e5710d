"""ElasticPS from Python: train a torch.nn.Module (or a built-in model) on NumPy arrays or files with the
elastic parameter server, watch and steer running jobs.

    import elasticps
    trainer = elasticps.Trainer(net, optimizer="adamw", lr=2e-3, virtual_workers=8, batch_per_vw=16)
    run = trainer.fit((x, y), test=(tx, ty), epochs=2, workers=2)
    run.digest, run.test_accuracy, run.history, run.model()

The package drives the ElasticPS binaries (`elasticps train`, `status`, `evaluate`, `predict`, launcher/attach.sh)
and reads what they write (events.jsonl, metrics.csv, result.json): docs/python.md.
"""
from .errors import (ArgumentError, CommandError, InvalidJobError, JobError, JobFailedError, ScriptError,
                     WorkerError)
from .job import Job, JoinedRun, Run
from .tables import Table, initial_row, load_tables
from .trainer import Trainer

__all__ = ["Trainer", "Run", "JoinedRun", "Job", "Table", "load_tables", "initial_row", "JobError", "ArgumentError", "ScriptError", "InvalidJobError",
           "JobFailedError", "WorkerError", "CommandError"]
