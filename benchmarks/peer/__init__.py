"""Peers that Strato is benchmarked against, run side by side on the same machine.

`benchmarks.peer.placement` installs real OpenStack Placement into its own
virtualenv (never a dependency of Strato), serves it, bulk-loads the same data
(`benchmarks.spec`) and drives it over HTTP the way Nova does.
"""

from benchmarks.spec import Inventory, ProviderSpec, inventory, make_specs

__all__ = ["Inventory", "ProviderSpec", "inventory", "make_specs"]
