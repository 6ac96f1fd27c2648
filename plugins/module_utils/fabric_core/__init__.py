"""fabric_core: the one library with the project's ZFS, LIO and iSCSI logic.

Ansible modules import it as ``ansible.module_utils.fabric_core`` (ansible.cfg points
module_utils at ./module_utils); fabricctl imports it as ``fabric_core`` (pyproject maps the
package). Inside the package, imports are relative so both names work. Nothing here imports
Ansible.
"""

__version__ = "0.2.0"
