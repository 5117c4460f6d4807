"""fakegpu: the MIG part of the fake nvidia-smi (tests only).

Models what the real driver does, in nvidia-smi's words (NVIDIA MIG User Guide):
* `nvidia-smi -i N -mig 1|0`: Hopper and newer switch at once; Ampere (compute capability 8.x)
  leaves the change pending until the GPU is reset (`nvidia-smi --gpu-reset -i N`, refused
  while nvidia-persistenced holds the GPU) or the machine reboots. The Ampere mode is kept
  across reboots (InfoROM, here /var/lib/fakegpu); the Hopper mode is not (/run).
* `nvidia-smi mig -cgi P[:start],… [-C] [-i N]`: GPU instances at the profiles' allowed
  placements (the catalogue's -lgipp table, given in gpu.json as mig_profiles), refused with
  "Insufficient Resources" when they overlap or no placement is free; -C adds the default CI.
* `-lgi`, `-lci`, `-dci`, `-dgi`, `-lgip`, `-lgipp`. Instances never survive a reboot (/run).
Every call is logged to /var/lib/fakegpu/commands.log by nvidia-smi itself.
"""

import json
import os

MODE_DIR_AMPERE = "/var/lib/fakegpu"
RUN_DIR = "/run/fakegpu"
NOT_SUPPORTED = 3
NOT_FOUND = 6
IN_USE = 19


def _load(path, default):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return default


def _save(path, doc):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as handle:
        json.dump(doc, handle)
    os.replace(tmp, path)


def ampere(gpu):
    return str(gpu.get("compute_capability", "8.0")).startswith("8.")


def mode_path(gpu):
    return os.path.join(MODE_DIR_AMPERE if ampere(gpu) else RUN_DIR, "mig-mode.json")


def modes(gpu):
    doc = _load(mode_path(gpu), {})
    return {str(i): doc.get(str(i), {"current": False, "pending": False}) for i in range(gpu["count"])}


def instances(gpu):
    doc = _load(os.path.join(RUN_DIR, "mig-instances.json"), {})
    return {str(i): doc.get(str(i), []) for i in range(gpu["count"])}


def save_modes(gpu, doc):
    _save(mode_path(gpu), doc)


def save_instances(doc):
    _save(os.path.join(RUN_DIR, "mig-instances.json"), doc)


def state(gpu):
    """What the rest of the fake reports: {index: {current, pending, instances}}."""
    m, inst = modes(gpu), instances(gpu)
    return {i: {"current": m[i]["current"], "pending": m[i]["pending"], "instances": inst[i]} for i in m}


def bus_id(i):
    return f"00000000:{0x17 + i * 0x20:02X}:00.0"


def profiles(gpu):
    """id -> {name, size, placements} from gpu.json (written from compat/mig.yaml)."""
    return {int(k): v for k, v in (gpu.get("mig_profiles") or {}).items()}


def find_profile(gpu, token):
    token = token.strip()
    if token.startswith("MIG "):
        token = token[4:]
    table = profiles(gpu)
    if token.isdigit() and int(token) in table:
        return int(token), table[int(token)]
    for pid, p in table.items():
        if p["name"] == token:
            return pid, p
    return None, None


def targets(gpu, ids):
    return [str(i) for i in (ids if ids is not None else range(gpu["count"]))]


def persistenced_running():
    try:
        with open("/run/nvidia-persistenced/nvidia-persistenced.pid") as handle:
            pid = int(handle.read().strip())
        os.kill(pid, 0)
        return True
    except (OSError, ValueError):
        return False


# -- mode -----------------------------------------------------------------------------------
def set_mode(gpu, value, ids):
    if not gpu.get("mig_capable"):
        for i in targets(gpu, ids):
            print(f"Unable to enable MIG Mode for GPU {bus_id(int(i))}: Not Supported")
        print("Treating as warning and moving on.\nAll done.")
        return NOT_SUPPORTED
    m = modes(gpu)
    want = value == "1"
    for i in targets(gpu, ids):
        if ampere(gpu) and m[i]["current"] != want:
            m[i]["pending"] = want
            print(
                f"Warning: MIG mode is in pending {'enable' if want else 'disable'} state for GPU {bus_id(int(i))}:"
                "In use by another client"
            )
            print(
                f"{bus_id(int(i))} is currently being used by one or more other processes (e.g. CUDA application or "
                "a monitoring application such as another instance of nvidia-smi). Please first kill all processes "
                "using the device and retry the command or reboot the system to make MIG mode effective."
            )
        else:
            m[i] = {"current": want, "pending": want}
            print(f"{'Enabled' if want else 'Disabled'} MIG Mode for GPU {bus_id(int(i))}")
    save_modes(gpu, m)
    print("All done.")
    return 0


def gpu_reset(gpu, ids):
    if persistenced_running():
        for i in targets(gpu, ids):
            print(f"The following GPUs could not be reset:\n  GPU {bus_id(int(i))}: In use by another client\n")
        print(
            "1 device is currently being used by one or more other processes (e.g., Fabric Manager, CUDA "
            "application, graphics application such as an X server, or a monitoring application such as another "
            "instance of nvidia-smi). Please first kill all processes using this device and all compute "
            "applications running in the system."
        )
        return IN_USE
    m, inst = modes(gpu), instances(gpu)
    for i in targets(gpu, ids):
        m[i] = {"current": m[i]["pending"], "pending": m[i]["pending"]}
        inst[i] = []
        print(f"GPU {bus_id(int(i))} was successfully reset.")
    save_modes(gpu, m)
    save_instances(inst)
    print("All done.")
    return 0


def boot(gpu):
    """What a reboot does to MIG: pending Ampere changes take effect."""
    m = modes(gpu)
    for i in m:
        m[i] = {"current": m[i]["pending"], "pending": m[i]["pending"]}
    save_modes(gpu, m)


# -- instances ------------------------------------------------------------------------------
def _enabled(gpu, i):
    return modes(gpu)[i]["current"]


def create(gpu, spec, ids, with_ci):
    inst_all = instances(gpu)
    rc = 0
    for i in targets(gpu, ids):
        if not _enabled(gpu, i):
            print(f"Unable to create a GPU instance on GPU  {i}: MIG mode is not enabled (Not Supported)")
            print("Failed to create GPU instances: Not Supported")
            return NOT_SUPPORTED
        current = inst_all[i]
        for token in spec.split(","):
            name, _, start = token.partition(":")
            pid, prof = find_profile(gpu, name)
            if prof is None:
                print(f"Unable to create a GPU instance on GPU  {i} using profile {name}: Invalid Argument")
                print("Failed to create GPU instances: Invalid Argument")
                return 2
            used = {s for g in current for s in range(g["start"], g["start"] + g["size"])}
            compute = sum(g["compute"] for g in current)
            starts = [int(start)] if start else prof["placements"]
            chosen = next(
                (s for s in starts if s in prof["placements"] and not used & set(range(s, s + prof["size"]))), None
            )
            if (
                chosen is None
                or compute + prof["compute"] > gpu.get("mig_compute_slices", 7)
                or sum(g["profile_id"] == pid for g in current) >= prof["max"]
            ):
                print(f"Unable to create a GPU instance on GPU  {i} using profile {name}: Insufficient Resources")
                print("Failed to create GPU instances: Insufficient Resources")
                inst_all[i] = current
                save_instances(inst_all)
                return NOT_FOUND
            gi_id = min(set(range(1, 15)) - {g["gi"] for g in current})
            current.append(
                {
                    "gi": gi_id,
                    "profile_id": pid,
                    "name": prof["name"],
                    "start": chosen,
                    "size": prof["size"],
                    "compute": prof["compute"],
                    "ci": with_ci,
                }
            )
            print(
                f"Successfully created GPU instance ID  {gi_id} on GPU  {i} using profile MIG {prof['name']} (ID  {pid})"
            )
            if with_ci:
                print(
                    f"Successfully created compute instance ID  0 on GPU  {i} GPU instance ID  {gi_id} using profile "
                    f"MIG {prof['name']} (ID  {prof['ci_profile']})"
                )
        inst_all[i] = current
    save_instances(inst_all)
    return rc


def destroy_ci(gpu, ids):
    inst_all = instances(gpu)
    found = False
    for i in targets(gpu, ids):
        for g in inst_all[i]:
            if g["ci"]:
                found = True
                g["ci"] = False
                print(f"Successfully destroyed compute instance ID  0 from GPU  {i} GPU instance ID  {g['gi']}")
    save_instances(inst_all)
    if not found:
        print("No compute instances found: Not Found")
        return NOT_FOUND
    return 0


def destroy_gi(gpu, ids):
    inst_all = instances(gpu)
    found = False
    for i in targets(gpu, ids):
        keep = []
        for g in inst_all[i]:
            if g["ci"]:
                print(f"Unable to destroy GPU instance ID  {g['gi']} from GPU  {i}: In use by another client")
                keep.append(g)
                continue
            found = True
            print(f"Successfully destroyed GPU instance ID  {g['gi']} from GPU  {i}")
        inst_all[i] = keep
        if keep:
            save_instances(inst_all)
            print("Failed to destroy GPU instances: In use by another client")
            return IN_USE
    save_instances(inst_all)
    if not found:
        print("No GPU instances found: Not Found")
        return NOT_FOUND
    return 0


def list_gi(gpu, ids):
    rows = []
    for i in targets(gpu, ids):
        if not _enabled(gpu, i):
            continue
        rows += [(int(i), g) for g in sorted(instances(gpu)[i], key=lambda g: g["gi"])]
    if not any(_enabled(gpu, i) for i in targets(gpu, ids)):
        print("No MIG-enabled devices found.")
        return NOT_FOUND
    if not rows:
        print("No GPU instances found: Not Found")
        return NOT_FOUND
    out = [
        "+-------------------------------------------------------+",
        "| GPU instances:                                        |",
        "| GPU   Name             Profile  Instance   Placement  |",
        "|                          ID       ID       Start:Size |",
        "|=======================================================|",
    ]
    for i, g in rows:
        out.append(
            f"|   {i}  MIG {g['name']:<12}  {g['profile_id']:>4}  {g['gi']:>8}  {g['start']:>8}:{g['size']:<5} |"
        )
        out.append("+-------------------------------------------------------+")
    print("\n".join(out))
    return 0


def list_ci(gpu, ids):
    rows = [(int(i), g) for i in targets(gpu, ids) if _enabled(gpu, i) for g in instances(gpu)[i] if g["ci"]]
    if not rows:
        print("No compute instances found: Not Found")
        return NOT_FOUND
    out = [
        "+--------------------------------------------------------------------+",
        "| Compute instances:                                                 |",
        "| GPU     GPU       Name             Profile   Instance   Placement  |",
        "|       Instance                       ID       ID       Start:Size |",
        "|         ID                                                         |",
        "|====================================================================|",
    ]
    for i, g in rows:
        out.append(
            f"|   {i}     {g['gi']:>3}       MIG {g['name']:<12} {profiles(gpu)[g['profile_id']]['ci_profile']:>4}"
            f"        0          0:{g['compute']:<5} |"
        )
        out.append("+--------------------------------------------------------------------+")
    print("\n".join(out))
    return 0


def list_profiles(gpu, ids, placements):
    for i in targets(gpu, ids):
        if not _enabled(gpu, i):
            print("No MIG-enabled devices found.")
            return NOT_FOUND
        for pid, p in sorted(profiles(gpu).items(), key=lambda kv: kv[0]):
            if placements:
                print(f"GPU  {i} Profile ID {pid:>2} Placements: {{{','.join(map(str, p['placements']))}}}:{p['size']}")
            else:
                print(
                    f"|   {i}  MIG {p['name']:<12} {pid:>4}  {p['max']:>2}/{p['max']:<2}  {p['memory_gib'] or 0:>8.2f}     |"
                )
    return 0


def run(gpu, args, _state_path=None, _state=None):
    ids = None
    rest = []
    create_spec = None
    with_ci = False
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-i", "--id"):
            i += 1
            ids = [int(x) for x in args[i].split(",")]
        elif a in ("-cgi", "--create-gpu-instance"):
            i += 1
            create_spec = args[i]
        elif a in ("-C", "--default-compute-instance"):
            with_ci = True
        else:
            rest.append(a)
        i += 1
    if rest[:1] == ["--set-mode"]:
        return set_mode(gpu, rest[1], [int(x) for x in rest[2].split(",")] if len(rest) > 2 and rest[2] else ids)
    if rest[:1] == ["--gpu-reset"]:
        return gpu_reset(gpu, ids)
    if rest[:1] == ["--boot"]:
        boot(gpu)
        return 0
    if create_spec is not None:
        return create(gpu, create_spec, ids, with_ci)
    if rest[:1] in (["-dci"], ["--destroy-compute-instance"]):
        return destroy_ci(gpu, ids)
    if rest[:1] in (["-dgi"], ["--destroy-gpu-instance"]):
        return destroy_gi(gpu, ids)
    if rest[:1] in (["-lgi"], ["--list-gpu-instances"]):
        return list_gi(gpu, ids)
    if rest[:1] in (["-lci"], ["--list-compute-instances"]):
        return list_ci(gpu, ids)
    if rest[:1] in (["-lgip"], ["--list-gpu-instance-profiles"]):
        return list_profiles(gpu, ids, placements=False)
    if rest[:1] in (["-lgipp"], ["--list-gpu-instance-possible-placements"]):
        return list_profiles(gpu, ids, placements=True)
    print(f'Invalid combination of input arguments. Please run "nvidia-smi mig -h" for help. ({" ".join(args)})')
    return 2
