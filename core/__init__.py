"""infertui core: the host library. Never imports textual, rich or the tui.

Its public surface, each package with its `__all__`:

- `infertui.core.client`: `connect(target)` and the `Client` API over Hyperswarm and HTTP.
- `infertui.core.host`: `HostService`, the one door to a host's engines for every face.
- `infertui.core.protocol`: messages, sampling, errors, job events and snapshots.
- `infertui.core.config` and `infertui.core.logging`: settings and log set-up.
- `infertui.core.transport.http` and `infertui.core.transport.p2p.*`: the host's faces.

What lies under them (engine, scheduler, the modules of a package) is implementation.
"""
