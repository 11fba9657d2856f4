"""A PyTorch Lightning callback: the scan of the trainer's train dataloader before the first
training step, failing the fit with the report.

    from batchcheck.lightning import BatchCheck
    trainer = L.Trainer(callbacks=[BatchCheck(loss=nn.CrossEntropyLoss())])
    trainer.fit(module, datamodule)   # raises batchcheck.ScanFailed before training on a failing loader
"""
try:
    import lightning.pytorch as pl
except ImportError:  # the older package name
    import pytorch_lightning as pl

from batchcheck.api import gate, lightning_precision

__all__ = ["BatchCheck"]


def _train_loader(trainer, module):
    # At on_fit_start the fit loop has not loaded its data yet: ask the same source it will.
    source = getattr(getattr(trainer, "fit_loop", None), "_data_source", None)
    if source is not None and hasattr(source, "dataloader"):
        try:
            loader = source.dataloader()
            if loader is not None:
                return loader
        except Exception:  # noqa: BLE001 - fall back to the public hooks below
            pass
    if getattr(trainer, "datamodule", None) is not None:
        return trainer.datamodule.train_dataloader()
    return module.train_dataloader()


class BatchCheck(pl.Callback):
    """loss: the loss your training_step applies to the model's output (a torch.nn loss module),
    None for the model only, or "model". model: the nn.Module to scan (default: the
    LightningModule's forward). Other keyword arguments go to batchcheck.scan(); precision= is the
    trainer's ("16-mixed" scans in fp16, "bf16-mixed" in bf16) unless given."""

    def __init__(self, loss=None, model=None, **options):
        super().__init__()
        self.loss = loss
        self.model = model
        self.options = options
        self.report = None

    def on_fit_start(self, trainer, pl_module):
        loader = _train_loader(trainer, pl_module)
        model = self.model if self.model is not None else pl_module
        options = dict(self.options)
        if "precision" not in options:
            options["precision"] = lightning_precision(getattr(trainer, "precision", None))
        self.report = gate(model, loader, self.loss, **options)
