"""Fleets: inventories and fleet files, the Ansible extra vars of a plan, and apply through ansible-runner."""
