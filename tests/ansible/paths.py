"""Where the Ansible content lives: the provision.gpu collection, kept beside the playbooks."""

from support import ROOT

PLAYBOOKS = ROOT / "playbooks"  # site.yml / release-lock.yml (wrappers), ansible.cfg
COLLECTIONS = PLAYBOOKS / "collections"  # an ANSIBLE_COLLECTIONS_PATH entry
COLLECTION = COLLECTIONS / "ansible_collections" / "provision" / "gpu"
ROLES = COLLECTION / "roles"
MODULES = COLLECTION / "plugins" / "modules"
SITE = COLLECTION / "playbooks" / "site.yml"  # provision.gpu.site: the check play, then the rolling play
SITE_VARS = COLLECTION / "playbooks" / "vars" / "converged_state.yml"  # the vars both plays read
