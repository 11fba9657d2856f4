"""The report of a scan as Python objects: Report, Finding (with every batch it occurred at),
Occurrence, and ScanFailed, which the training callbacks raise."""
import json
import os
import subprocess
import tempfile

from batchcheck._cli import binary

__all__ = ["Report", "Finding", "Occurrence", "ScanFailed"]


class ScanFailed(Exception):
    """The scan's gate failed (the training callbacks raise it): .report holds the findings."""

    def __init__(self, report, message=None):
        self.report = report
        if message is None:
            errors = report.errors()
            first = errors[0] if errors else (report.findings[0] if report.findings else None)
            where = "" if first is None else ": %s at batch %s, samples %s" % (first.id, first.batch, first.samples[:8])
            message = "batchcheck: the scan failed (%d errors)%s\n%s" % (len(errors), where, report.text)
        super().__init__(message)


class Occurrence:
    """One batch where a finding occurred: .rank, .batch, .samples (its own, capped), .count (of
    that batch's samples), .message (where that batch failed otherwise than the finding's first),
    .files (an unreadable sample's files)."""

    def __init__(self, data):
        self.data = data
        self.rank = data.get("rank")
        self.batch = data.get("batch")
        self.samples = data.get("samples", [])
        self.count = data.get("count", len(self.samples))
        self.message = data.get("message")
        self.files = data.get("files")

    def __repr__(self):
        rank = "" if self.rank in (None, 0) else "rank %s " % self.rank
        return "<Occurrence %sbatch %s samples=%s>" % (rank, self.batch, self.samples[:8])


class Finding:
    """One finding of the report: .id, .severity, .batch (the first), .batches (every batch it
    occurred at), .samples (the first batch's), .count (samples over every batch), .occurrences
    (each batch with its rank and samples), .message, .fixes, and every other field of its JSON
    object as .data."""

    def __init__(self, data):
        self.data = data
        self.id = data.get("id")
        self.severity = data.get("severity")
        self.batch = data.get("batch")
        self.batches = data.get("batches", [] if self.batch is None else [self.batch])
        self.samples = data.get("samples", [])
        self.count = data.get("count", len(self.samples))
        self.occurrences = [Occurrence(o) for o in data.get("occurrences", [])]
        self.message = data.get("message", "")
        self.fixes = data.get("fixes", [])

    def __repr__(self):
        if self.batch is None:
            where = ""
        elif len(self.batches) > 1:
            where = " at batch %s and %d more (batches %s%s)" % (
                self.batch, len(self.batches) - 1, self.batches[:8], ", ..." if len(self.batches) > 8 else "")
        else:
            where = " at batch %s" % self.batch
        return "<Finding %s %s%s samples=%s count=%s>" % (self.severity, self.id, where, self.samples[:8], self.count)


class Report:
    """The report of a scan: .ok (the verdict passes), .findings, .data (the JSON report as a
    dict), .text (what the command printed), .to_json(), .html(path)."""

    def __init__(self, data, text, exit_code):
        self.data = data
        self.text = text
        self.exit_code = exit_code
        self.findings = [Finding(f) for f in data.get("findings", [])]

    @property
    def ok(self):
        return self.exit_code == 0

    def errors(self):
        return [f for f in self.findings if f.severity == "error"]

    def to_json(self, indent=2):
        return json.dumps(self.data, indent=indent)

    def html(self, path):
        """Writes the HTML view of this report to `path` (batchcheck render)."""
        with tempfile.TemporaryDirectory(prefix="batchcheck-") as tmp:
            src = os.path.join(tmp, "report.json")
            with open(src, "w") as f:
                json.dump(self.data, f)
            subprocess.run([binary(), "render", src, "--html", os.fspath(path)], check=True)
        return path

    def __repr__(self):
        return "<batchcheck Report %s: %d findings>" % ("ok" if self.ok else "FAILED", len(self.findings))


# ---- the batches: what the loader yields, as named tensor fields ----
