"""The runtime precision audit: does the precision that runs match the plugin's ``dtypes()`` table?

[`PrecisionAudit`][precision_base.audit.PrecisionAudit] (a Lightning callback;
``precision_base.pytorch_lightning.PrecisionAudit`` for the other
namespace) and [`audit_fabric_steps`][precision_base.audit.audit_fabric_steps] (for Fabric) observe the first training
steps of a real run through hooks
([`precision_base.audit.observe`][], [`precision_base.audit.collectives`][]), compare every observation with the
plugin's table and its documented exceptions ([`precision_base.audit.compare`][]) and produce an
[`AuditReport`][precision_base.audit.AuditReport] of [`AuditRow`][precision_base.audit.AuditRow] s
([`precision_base.audit.report`][]). Only the public contract is used,
so a third-party plugin is audited with no code of its own. See the docs page "Precision audit".
"""

from __future__ import annotations

from precision_base.audit.callback import ENV_VARIABLE, PrecisionAudit, PrecisionAuditImpl, audit_from_env
from precision_base.audit.core import AuditSession
from precision_base.audit.fabric import FabricAudit, audit_fabric_steps
from precision_base.audit.report import ROLES, AuditReport, AuditRow

__all__ = [
    "ENV_VARIABLE",
    "ROLES",
    "AuditReport",
    "AuditRow",
    "AuditSession",
    "FabricAudit",
    "PrecisionAudit",
    "PrecisionAuditImpl",
    "audit_fabric_steps",
    "audit_from_env",
]
