"""What a prediction is of, in plain words: the lines above its table and its figure's title.

``lines(meta)`` reads the prediction's metadata (``predictions.json``'s ``meta``) and says
the model and its step, how large an epoch is and how long the run, which machine and how
many hosts, which network and where it came from, the one baseline every speedup is
against, and each flag that won over a file's own value. No I/O here.

Imports: contracts.units.
"""
from __future__ import annotations

from contracts.units import format_duration


def lines(meta: dict) -> list[str]:
    out = [f"Predicted by the simulator: {run_words(meta)}.",
           f"Machine: {machine_words(meta)}.",
           f"Network: {meta['network']}.",
           f"Speedup: against {baseline_words(meta)}; efficiency = speedup "
           + ("/ P." if meta["baseline"]["workers"] == 1
              else f"x {meta['baseline']['workers']} / P.")]
    if meta.get("overrides"):
        out.append("Flags over files: " + "; ".join(meta["overrides"]) + ".")
    if meta.get("profile_quality"):
        out.append(meta["profile_quality"])      # contracts.quality.warning
    return out


def run_words(meta: dict) -> str:
    """Model, batch, the epoch's size and how long the run is."""
    w = meta["workload"]
    text = (f"model {w['model']}, {w['batch_per_worker']} samples per worker and step; an "
            f"epoch is {w['dataset_samples']:,} samples")
    if meta.get("dataset") and meta["dataset"] != "--dataset-size":
        text += f" ({meta['dataset']}" + (", the default: --dataset-size for yours)"
                                          if meta.get("dataset_default") else ")")
    return text + f", the run {length_words(w)}"


def length_words(workload: dict) -> str:
    """``1 epoch``, ``90 epochs`` or ``1,000 iterations per worker``."""
    if workload.get("iterations"):
        return f"{workload['iterations']:,} iterations per worker"
    epochs = workload["epochs"]
    return f"{epochs:g} epoch" + ("" if epochs == 1 else "s")


def machine_words(meta: dict) -> str:
    """Whose hosts, how many ranks on each and how many hosts as P grows."""
    h = meta["hosts"]
    kind = (f"{h['cores_per_host']} x {h['device']}" if h.get("device")
            else f"{h['cores_per_host']} cores")
    profile = (f"profile {meta['profile']}: {meta['profile_host']}, measured "
               f"{meta['profile_created'][:10]}")
    what = meta["machine"]
    if what == "the profile's one host":
        p_max = h["at_max"][0]
        share = (f"; at P = {p_max} its {h['cores_per_host']} cores run {p_max} ranks"
                 if p_max > h["cores_per_host"] else "")
        return f"the one host the profile was measured on ({profile}){share}"
    if what == "hosts like the profile's":
        what = f"hosts like the profile's ({profile})"
    else:
        what = f"{what} ({kind} each; other costs: {profile})"
    (p_lo, h_lo), (p_hi, h_hi) = h["at_min"], h["at_max"]
    if not h["grows"]:
        return f"{what}: {h_hi} host{'s' if h_hi > 1 else ''}, whatever P"
    grow = (f"{h_lo} host{'s' if h_lo > 1 else ''} at P = {p_lo} to {h_hi} at P = {p_hi}"
            if h_hi > h_lo else f"{h_hi} host{'s' if h_hi > 1 else ''} up to P = {p_hi}")
    return f"{what}: {h['ranks_per_host']} ranks per host, hosts grow with P: {grow}"


def baseline_words(meta: dict) -> str:
    """The one baseline: the fastest single worker, or the fastest at ``--baseline P0``."""
    b = meta["baseline"]
    which = ("the fastest single worker" if b["workers"] == 1
             else f"the fastest at P = {b['workers']} (--baseline)")
    return f"{which}, {b['scheme']} at {format_duration(b['epoch_s'])} per epoch"


def subtitle(meta: dict) -> str:
    """The machine and network in a few words, for a figure's title."""
    h = meta["hosts"]
    kind = (f"{h['cores_per_host']} x {h['device']}" if h.get("device")
            else f"{h['cores_per_host']} cores")
    hosts = (f"{h['ranks_per_host']} ranks per host, up to {h['at_max'][1]} hosts"
             if h["grows"] else f"{h['at_max'][1]} host{'s' if h['at_max'][1] > 1 else ''}")
    return f"{meta['machine']}, {hosts} of {kind}; network {meta['network'].split(':')[0]}"
