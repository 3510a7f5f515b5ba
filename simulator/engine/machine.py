"""What a prediction runs on: the profile, the cluster's hardware and the workload files.

A workload measured on another device is scaled to this one by the ratio of their
sustained compute rates (``scaled_cost``; its measured optimizer update is that device's, so
the model prices this one's, ``engine.run.with_optimizer_step``); what a cluster's accelerator
hosts decide instead of the profile is ``placement.on_hardware``'s.

``machine(profile, cluster, workloads)`` returns the profile the engines run on
and the provenance of every number in it: measured (a profile or a workload
file), preset (with the preset's source), or the user's.
Imports: ``contracts``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import tomllib

from contracts.checks import ConfigError
from contracts.cluster import PRESETS_DIR, Cluster
from contracts.profile import ModelCost, Profile
from contracts.units import format_rate, parse_flop_rate
from contracts.workload import ModelWorkload, model_cost


@dataclass(frozen=True)
class Machine:
    profile: Profile
    provenance: tuple[dict, ...]          # {"quantity", "value", "origin"}, one per number


# the devices table's key of each precision's rate (a device without TF32 runs FP32)
RATE_KEYS = {"fp32": ("flops",), "tf32": ("tf32_flops", "flops"), "amp": ("amp_flops",)}


def device_rates(precision: str = "fp32") -> dict[str, tuple[float, str]]:
    """Device name (and aliases, lower case) -> (sustained FLOP/s in ``precision``,
    source), for the devices the table rates in it."""
    raw = tomllib.loads((PRESETS_DIR / "devices.toml").read_text())
    out = {}
    for d in raw.get("device", []):
        key = next((k for k in RATE_KEYS[precision] if k in d), None)
        if key is None:
            continue
        rate = parse_flop_rate(d[key]["value"])
        for name in [d["name"], *d.get("aliases", [])]:
            out[name.lower()] = (rate, f"devices table: {d[key]['source']}")
    return out


def _device_keys(name: str) -> set[str]:
    """The rate keys the devices table gives the device ``name`` (or an alias of it)."""
    raw = tomllib.loads((PRESETS_DIR / "devices.toml").read_text())
    return next((set(d) for d in raw.get("device", []) if name.lower() in
                 [d["name"].lower(), *(a.lower() for a in d.get("aliases", []))]), set())


def scaled_cost(w: ModelWorkload, cluster: Cluster | None) -> tuple:
    """The workload's cost on the cluster's device, and a line saying how it was scaled:
    by the ratio of the two devices' rates in the workload's precision (FP32 from the
    cluster's [device] or the devices table, TF32 and AMP from the devices table)."""
    cost = model_cost(w)
    device = cluster.device if cluster is not None else None
    if device is None:
        if w.device.lower() != "cpu":
            raise ConfigError(f"workload {w.name} was measured on {w.device}, and the cluster's "
                              "hosts have no accelerator: describe one ([device] in a cluster "
                              "file, or a --preset)")
        return cost, f"as measured on {w.device} ({w.threads} thread(s)); cores not scaled"
    rates = device_rates()
    same = w.device.lower() == device.name.lower() or (
        w.device.lower() in rates and rates.get(device.name.lower()) == rates[w.device.lower()])
    if same:
        return cost, f"as measured on {w.device}"
    cost = replace(cost, update_fraction=0.0)   # its measured update was another device's
    if w.precision != "fp32":
        return _scaled_precision(w, cost, device)
    if w.device_flops_per_s > 0:
        source_rate, how = w.device_flops_per_s, "the workload's measured.device_flops"
    elif w.device.lower() in rates:
        source_rate, how = rates[w.device.lower()][0], "the devices table"
    elif w.achieved_flops_per_s() > 0:
        source_rate = w.achieved_flops_per_s()
        how = "the FLOPs it reached there (the target's rated speed: an optimistic bound)"
    else:
        raise ConfigError(f"workload {w.name} was measured on {w.device}; to scale it to "
                          f"{device.name}, give measured.device_flops or model.flops_per_sample")
    factor = source_rate / device.flops_per_s
    steps = tuple(replace(s, step_intercept_s=s.step_intercept_s * factor,
                          step_s_per_sample=s.step_s_per_sample * factor) for s in cost.steps)
    note = (f"scaled from {w.device} ({source_rate / 1e12:.3g} TFLOP/s, from {how}) to "
            f"{device.name} ({device.flops_per_s / 1e12:.3g} TFLOP/s): x{factor:.3g}")
    return replace(cost, steps=steps, eval_s_per_sample=cost.eval_s_per_sample * factor), note


def _scaled_precision(w: ModelWorkload, cost, device) -> tuple:
    """A TF32 or AMP step scaled to another device by the devices table's rates in that
    precision (datasheet tensor-core peaks: a rough guide, said as such)."""
    rates = device_rates(w.precision)
    missing = [n for n in (w.device, device.name) if n.lower() not in rates]
    if missing:
        raise ConfigError(f"workload {w.name} ({w.precision}) measured on {w.device} cannot be "
                          f"scaled to {device.name}: the devices table has no {w.precision} "
                          f"rate for {missing[0]} (simulator/data/presets/devices.toml)")
    factor = rates[w.device.lower()][0] / rates[device.name.lower()][0]
    steps = tuple(replace(s, step_intercept_s=s.step_intercept_s * factor,
                          step_s_per_sample=s.step_s_per_sample * factor) for s in cost.steps)
    fp32 = [n for n in (w.device, device.name) if w.precision == "tf32"
            and "tf32_flops" not in _device_keys(n)]
    note = (f"scaled from {w.device} to {device.name} by their datasheet {w.precision} peaks "
            + (f"({' and '.join(fp32)}: no TF32, its FP32) " if fp32 else "")
            + f"(devices table): x{factor:.3g}, a rough guide")
    return replace(cost, steps=steps, eval_s_per_sample=cost.eval_s_per_sample * factor), note


def machine(profile: Profile, profile_origin: str, cluster: Cluster | None,
            workloads: list[tuple[ModelWorkload, str]] = ()) -> Machine:
    """The profile to simulate with and where each of its numbers came from: the
    workload files' models added (scaled to the cluster's device); what the cluster's
    hardware decides instead is applied once, where a run is laid out
    (``placement.layout``)."""
    rows = []
    prof = profile
    models = {m.model: m for m in prof.models}
    for w, path in workloads:
        cost, how = scaled_cost(w, cluster)
        models[w.name] = _with_server_update(cost, models.get(w.name)
                                             or models.get(w.slept_from))
        origin = (f"workload file {path} ({w.provenance.get('source', 'numbers')}"
                  + (f": {w.provenance['note_source']}" if w.provenance.get("note_source") else "")
                  + ")")
        rows.append({"quantity": f"{w.name}: step time", "value":
                     f"{w.step_s * 1e3:.4g} ms per {w.batch_size} samples on {w.device} "
                     f"in {w.precision}; {how}",
                     "origin": origin + (f"; {w.provenance['precision']}"
                                         if w.provenance.get("precision") else "")})
        if w.input_s_per_sample > 0:
            rows.append({"quantity": f"{w.name}: input pipeline", "value":
                         f"{w.input_s_per_sample * 1e3:.4g} ms of a host CPU core per sample"
                         + (f", {w.input_workers} loader processes a rank"
                            if w.input_workers else "")
                         + "".join(f"; {t * 1e3:.4g} ms with {n} at once" for n, t in w.input_at)
                         + (f", {cluster.cpu_cores} cores a host" if cluster is not None
                            and cluster.cpu_cores else " (the cluster names no cpu_cores: "
                            "not applied)"), "origin": origin})
        rows.append({"quantity": f"{w.name}: tensors and backward split", "value":
                     f"{w.params:,} parameters in {len(w.layers)} layers, backward "
                     f"{w.backward_fraction:.0%} of a step, split by {w.shares_from()}",
                     "origin": origin})
    prof = replace(prof, models=tuple(models.values()))
    rows += _cluster_rows(cluster)
    rows += _profile_rows(profile, profile_origin, cluster, [w.name for w, _ in workloads])
    return Machine(prof, tuple(rows))


def _with_server_update(cost: ModelCost, profiled: ModelCost | None) -> ModelCost:
    """``cost`` with the server's update the profile measured for the same model (its
    name and parameter count; for a phantom's slept workload the model it sleeps, whose
    real update the phantom server runs), and its curve against the idle time before it:
    a host's CPU cost, which a workload file does not hold."""
    if profiled is None or profiled.param_count != cost.param_count or cost.server_update_s:
        return cost
    return replace(cost, server_update_s=profiled.server_update_s,
                   server_idle_s=profiled.server_idle_s,
                   server_update_after_idle_s=profiled.server_update_after_idle_s)


def _cluster_rows(cluster: Cluster | None) -> list[dict]:
    if cluster is None:
        return []
    origin = cluster.name and f"preset {cluster.name}" or "user"
    rows = []
    for field, source in cluster.sources:
        rows.append({"quantity": f"cluster {field}", "value": _value(cluster, field),
                     "origin": source or origin})
    if not cluster.sources:        # flags: every value is the user's
        rows.append({"quantity": "cluster", "value": f"{cluster.hosts} host(s) x "
                     f"{cluster.cores_per_host} " + ("devices" if cluster.device else "cores")
                     + (f", link {format_rate(cluster.link.bandwidth_bytes_per_s)} "
                        f"{cluster.link.latency_s * 1e6:g} us" if cluster.link else ""),
                     "origin": "user (command line)"})
    return rows


def _value(cluster: Cluster, field: str) -> str:
    hw = cluster.hardware
    values = {"cluster.hosts": cluster.hosts, "cluster.cores_per_host": cluster.cores_per_host,
              "cluster.cpu_cores": cluster.cpu_cores,
              "cluster.devices_per_host": cluster.cores_per_host,
              "cluster.placement": cluster.placement}
    if cluster.link:
        values["link.latency"] = f"{cluster.link.latency_s * 1e6:g} us"
        values["link.bandwidth"] = "line rate (payload: " + \
            format_rate(cluster.link.bandwidth_bytes_per_s) + ")"
    if hw:
        values.update({"link.nics": hw.nics, "nccl.channels": hw.channels,
                       "nccl.call_latency": f"{hw.call_latency_s * 1e6:g} us",
                       "topology.kind": hw.topology,
                       "topology.oversubscription": hw.oversubscription})
        values.update({"nccl.protocol": hw.protocol, "nccl.release": hw.release or "-",
                       "nccl.compute_slowdown": hw.compute_slowdown})
        if hw.ring_plateau != 1.0:
            values.update({"nccl.ring_plateau": hw.ring_plateau,
                           "nccl.ring_plateau_bytes_per_rank": f"{hw.ring_plateau_bytes:.0f} B"})
        values.update({f"nccl.compute_slowdown_{p}": v for p, v in hw.precision_slowdowns})
        for name, ll in (("ll", hw.ll), ("ll128", hw.ll128)):
            if ll is not None:
                values.update({
                    f"nccl.{name}_call_latency": f"{ll.call_latency_s * 1e6:g} us",
                    f"nccl.{name}_intra_latency": f"{ll.intra_latency_s * 1e6:g} us",
                    f"nccl.{name}_link_latency": f"{ll.link_latency_s * 1e6:g} us",
                    f"nccl.{name}_bandwidth_share": ll.bandwidth_share,
                    f"nccl.{name}_max_bandwidth": format_rate(ll.max_bus_bytes_per_s)
                    if ll.max_bus_bytes_per_s else "no cap"})
        if hw.ll:
            values["nccl.ll_threshold"] = f"{hw.ll_threshold_bytes:.0f} B"
            values["nccl.ll_thread_threshold"] = f"{hw.ll_thread_bytes:.0f} B"
        if hw.device:
            values["device.name"] = hw.device.name
            values["device.flops"] = f"{hw.device.flops_per_s / 1e12:g} TFLOP/s"
        if hw.intra:
            values["intra.bandwidth"] = format_rate(hw.intra.bandwidth_bytes_per_s)
            values["intra.latency"] = f"{hw.intra.latency_s * 1e6:g} us"
        if hw.host_link:
            values["host_link.bandwidth"] = format_rate(hw.host_link.bandwidth_bytes_per_s)
            values["host_link.latency"] = f"{hw.host_link.latency_s * 1e6:g} us"
    return str(values.get(field, "see the file"))


def _profile_rows(profile: Profile, origin: str, cluster: Cluster | None,
                  from_files: list[str]) -> list[dict]:
    where = (f"profile {origin} (measured on {profile.provenance.host}, "
             f"{profile.provenance.created_utc[:10]})")
    rows = []
    if cluster is None or cluster.device is None:
        rows.append({"quantity": "core sharing, scheduler delays, shared-memory transports "
                     "(gloo, mpi), server update", "value": "as measured", "origin": where})
    else:
        rows.append({"quantity": "parameter-server update (ps_* schemes only), gloo's TCP "
                     "and reduction on the host (--backend gloo only)",
                     "value": "as measured on the profile's cores", "origin": where})
    if profile.loop_s_per_step and (cluster is None or cluster.device is None):
        rows.append({"quantity": "the training loop's Python", "value":
                     f"{profile.loop_s_per_step * 1e3:.3g} ms a step on each worker's core, "
                     "with its step", "origin": where})
    built_in = [m.model for m in profile.models if m.model not in from_files]
    if built_in and (cluster is None or cluster.device is None):
        rows.append({"quantity": "step times of the built-in models", "value":
                     ", ".join(built_in), "origin": where})
    return rows


def provenance_line(rows) -> str:
    """Which numbers came from where, in one line under a table: measured (profile or
    workload file), preset (its name and the sections it gave), the user's."""
    groups: dict[str, list[str]] = {}
    for r in rows:
        origin, quantity = r["origin"], r["quantity"]
        if origin.startswith("preset "):
            key = origin.split(":")[0]
            name = quantity.replace("cluster ", "").split(".")[0]
        elif origin.startswith(("user", "assumed")):
            key, name = origin.split(" ")[0].rstrip(":"), quantity.replace("cluster ", "").split(".")[0]
        else:
            key = "measured"
            name = quantity.split(":")[0] + (" (profile)" if origin.startswith("profile")
                                             else " (workload file)")
        if name not in groups.setdefault(key, []):
            groups[key].append(name)
    return "numbers: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in groups.items())


def workload_path_name(path: str) -> str:
    return Path(path).name
