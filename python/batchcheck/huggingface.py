"""A Hugging Face transformers Trainer callback: the scan of the Trainer's train dataloader in
on_train_begin, before the first step, stopping the run with the report.

    from batchcheck.huggingface import BatchCheckCallback
    trainer = Trainer(model, args, train_dataset=ds, callbacks=[BatchCheckCallback(nn.CrossEntropyLoss(), output="logits")])
"""
from transformers import TrainerCallback

from batchcheck.api import gate
from batchcheck.report import ScanFailed

__all__ = ["BatchCheckCallback"]


class BatchCheckCallback(TrainerCallback):
    """loss: applied to the model's prediction (output= names it in a dict output, "logits" for
    the transformers models) against the batch's `target_key` field (default "labels"); or
    "model" when forward computes its own loss. Other keyword arguments go to batchcheck.scan();
    precision= is the TrainingArguments' (fp16=True scans in fp16, bf16=True in bf16) unless given."""

    def __init__(self, loss=None, output=None, target_key="labels", **options):
        self.loss = loss
        self.options = dict(options, output=output, target_key=target_key)
        self.report = None

    def on_train_begin(self, args, state, control, model=None, train_dataloader=None, **kwargs):
        if train_dataloader is None or model is None:
            raise ScanFailed(None, "batchcheck: the Trainer passed no train dataloader or model to its callbacks")
        options = dict(self.options)
        if "precision" not in options:
            options["precision"] = "fp16" if getattr(args, "fp16", False) else "bf16" if getattr(args, "bf16", False) else None
        self.report = gate(model, train_dataloader, self.loss, **options)
        return control
