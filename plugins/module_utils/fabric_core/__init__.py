"""fabric_core: the one library with the project's ZFS, LIO and iSCSI logic.

It is the module_utils of the Ansible collection gpufabric.storage: modules and plugins import it as
``ansible_collections.gpufabric.storage.plugins.module_utils.fabric_core``; fabricctl imports it as
``fabric_core`` (pyproject maps the package). Inside the package, imports are relative so both names
work. Nothing here imports Ansible.

Its folders are its layers and sides (docs/architecture.md): ``base`` (foundations of both sides),
``node`` (what acts on a GPU node; imports only ``base``), ``storage`` (what acts on a storage node) and
``services`` (what composes them on a storage node). tests/unit/test_architecture.py keeps that shape.
"""

__version__ = "0.2.0"
