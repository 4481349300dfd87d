"""NVIDIA's XID catalogue as data: XID -> mnemonic, NVIDIA resolution bucket, our action and status.

Source: NVIDIA "Analyzing Xid Errors with the Xid Catalog" (docs.nvidia.com/deploy/xid-errors/
analyzing-xid-catalog.html) and its spreadsheet ``Xid-Catalog.xlsx``, column "Resolution Bucket (Immediate
Action)". NVIDIA publishes it for Ampere and newer; its older page for Volta and earlier gives no buckets,
so the same table serves V100 too.

The six plain buckets map onto our actions as docs/checks.md fixes (:data:`BUCKET_ACTION`). Rows whose
bucket is a workflow, another NVIDIA class, or empty in the catalogue carry the action we chose and a
``note`` saying why; ``checks/xid.py`` refines the workflow rows with the other XIDs seen on the same GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from core.findings import Action, Status


class Bucket(StrEnum):
    """NVIDIA's "Resolution Bucket (Immediate Action)" for an XID, spelled as in the catalogue."""

    IGNORE = "IGNORE"
    RESTART_APP = "RESTART_APP"
    RESET_GPU = "RESET_GPU"
    DRAIN_AND_RESET = "DRAIN_AND_RESET"
    RESTART_VM = "RESTART_VM"
    RESTART_BM = "RESTART_BM"
    CONTACT_SUPPORT = "CONTACT_SUPPORT"
    WORKFLOW_XID_45 = "WORKFLOW_XID_45"
    WORKFLOW_XID_48 = "WORKFLOW_XID_48"
    WORKFLOW_NVLINK_ERR = "WORKFLOW_NVLINK_ERR"
    WORKFLOW_NVLINK5_ERR = "WORKFLOW_NVLINK5_ERR"
    XID_154 = "XID_154"
    CHECK_MECHANICALS = "CHECK_MECHANICALS"
    UPDATE_SWFW = "UPDATE_SWFW"
    CHECK_UVM = "CHECK_UVM"
    NOT_GIVEN = "NOT_GIVEN"  # listed in the catalogue without any bucket (XIDs 162-172)


BUCKET_ACTION: dict[Bucket, Action] = {
    Bucket.IGNORE: Action.NONE,
    Bucket.RESTART_APP: Action.RESTART_APP,
    Bucket.RESET_GPU: Action.RESET_GPU,
    Bucket.DRAIN_AND_RESET: Action.DRAIN_AND_RESET,
    Bucket.RESTART_VM: Action.REBOOT,
    Bucket.RESTART_BM: Action.REBOOT,
    Bucket.CONTACT_SUPPORT: Action.REPLACE,
}
"""The fixed mapping (docs/checks.md, "Findings and the verdict"); other buckets' rows record a decision."""


def status_for_action(action: Action) -> Status:
    """An XID's status follows from its action: none ok, restart_app warn, reset_gpu and worse fail."""
    if action is Action.NONE:
        return Status.OK
    if action is Action.RESTART_APP:
        return Status.WARN
    return Status.FAIL


@dataclass(frozen=True, slots=True)
class XidEntry:
    """One catalogue row: what NVIDIA says about an XID and what we recommend by default."""

    xid: int
    mnemonic: str
    description: str
    bucket: Bucket
    action: Action
    note: str = ""

    @property
    def status(self) -> Status:
        """The finding status this row yields when no workflow or override changes the action."""
        return status_for_action(self.action)


def _row(
    xid: int, mnemonic: str, description: str, bucket: Bucket, *, action: Action | None = None, note: str = ""
) -> XidEntry:
    """A row whose action defaults to the contract's bucket mapping; other buckets must name theirs."""
    if action is None:
        action = BUCKET_ACTION[bucket]
    return XidEntry(xid, mnemonic, description, bucket, action, note)


_ROWS: tuple[XidEntry, ...] = (
    _row(1, "ROBUST_CHANNEL_FIFO_ERROR_FIFO_METHOD", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(2, "ROBUST_CHANNEL_FIFO_ERROR_SW_METHOD", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(3, "ROBUST_CHANNEL_FIFO_ERROR_UNK_METHOD", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(4, "ROBUST_CHANNEL_FIFO_ERROR_CHANNEL_BUSY", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(
        5, "ROBUST_CHANNEL_FIFO_ERROR_RUNOUT_OVERFLOW", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT
    ),
    _row(6, "ROBUST_CHANNEL_FIFO_ERROR_PARSE_ERR", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(7, "ROBUST_CHANNEL_FIFO_ERROR_PTE_ERR", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(8, "ROBUST_CHANNEL_FIFO_ERROR_IDLE_TIMEOUT", "GPU stopped processing", Bucket.RESTART_APP),
    _row(9, "ROBUST_CHANNEL_GR_ERROR_INSTANCE", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(10, "ROBUST_CHANNEL_GR_ERROR_SINGLE_STEP", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(
        11,
        "ROBUST_CHANNEL_GR_ERROR_MISSING_HW",
        "Invalid or corrupted push buffer stream",
        Bucket.RESTART_APP,
    ),
    _row(12, "ROBUST_CHANNEL_GR_ERROR_SW_METHOD", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(
        13,
        "ROBUST_CHANNEL_GR_EXCEPTION / ROBUST_CHANNEL_GR_ERROR_SW_NOTIFY",
        "Graphics Engine Exception",
        Bucket.RESTART_APP,
        note="Repeats on one GPU (xid.app_error_repeat_threshold): message advises diagnostics.",
    ),
    _row(14, "ROBUST_CHANNEL_FAKE_ERROR", "Fake or injected error from user space", Bucket.IGNORE),
    _row(15, "ROBUST_CHANNEL_SCANLINE_TIMEOUT", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(16, "ROBUST_CHANNEL_VBLANK_CALLBACK_TIMEOUT", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(17, "ROBUST_CHANNEL_PARAMETER_ERROR", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(18, "ROBUST_CHANNEL_BUS_MASTER_TIMEOUT_ERROR", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(19, "ROBUST_CHANNEL_DISP_MISSED_NOTIFIER", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(20, "ROBUST_CHANNEL_MPEG_ERROR_SW_METHOD", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(21, "ROBUST_CHANNEL_ME_ERROR_SW_METHOD", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(22, "ROBUST_CHANNEL_VP_ERROR_SW_METHOD", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(23, "ROBUST_CHANNEL_RC_LOGGING_ENABLED", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(24, "ROBUST_CHANNEL_GR_SEMAPHORE_TIMEOUT", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(25, "ROBUST_CHANNEL_GR_ILLEGAL_NOTIFY", "Invalid or illegal push buffer stream", Bucket.RESTART_APP),
    _row(
        26, "ROBUST_CHANNEL_FIFO_ERROR_FBISTATE_TIMEOUT", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT
    ),
    _row(27, "ROBUST_CHANNEL_VP_ERROR", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(28, "ROBUST_CHANNEL_VP2_ERROR", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(29, "ROBUST_CHANNEL_BSP_ERROR", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(30, "ROBUST_CHANNEL_BAD_ADDR_ACCESS", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(
        31,
        "ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT",
        "GPU memory page fault",
        Bucket.RESTART_APP,
        note="Repeats on one GPU (xid.app_error_repeat_threshold): message advises diagnostics.",
    ),
    _row(32, "ROBUST_CHANNEL_PBDMA_ERROR", "Invalid or corrupted push buffer stream", Bucket.RESTART_APP),
    _row(33, "ROBUST_CHANNEL_SEC_ERROR", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(34, "ROBUST_CHANNEL_MSVLD_ERROR", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(35, "ROBUST_CHANNEL_MSPDEC_ERROR", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(36, "ROBUST_CHANNEL_MSPPP_ERROR", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(37, "ROBUST_CHANNEL_FECS_ERR_UNIMP_FIRMWARE_METHOD", "Driver firmware error", Bucket.IGNORE),
    _row(38, "ROBUST_CHANNEL_FECS_ERR_WATCHDOG_TIMEOUT", "Driver firmware error", Bucket.IGNORE),
    _row(39, "ROBUST_CHANNEL_CE0_ERROR", "Copy Engine Exception", Bucket.RESTART_APP),
    _row(40, "ROBUST_CHANNEL_CE1_ERROR", "Copy Engine Exception", Bucket.RESTART_APP),
    _row(41, "ROBUST_CHANNEL_CE2_ERROR", "Copy Engine Exception", Bucket.RESTART_APP),
    _row(42, "ROBUST_CHANNEL_VIC_ERROR", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(43, "ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR", "GPU stopped processing", Bucket.IGNORE),
    _row(
        44,
        "ROBUST_CHANNEL_GR_FAULT_DURING_CTXSW",
        "Graphics Engine fault during context switch",
        Bucket.IGNORE,
    ),
    _row(
        45,
        "ROBUST_CHANNEL_PREEMPTIVE_REMOVAL",
        "Preemptive cleanup after an application abort or a previous error",
        Bucket.WORKFLOW_XID_45,
        action=Action.NONE,
        note="Logged on every app abort. Alone: hint to restart Fabric Manager; else follow the others.",
    ),
    _row(46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "GPU stopped processing", Bucket.RESET_GPU),
    _row(47, "ROBUST_CHANNEL_NVENC0_ERROR", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(
        48,
        "ROBUST_CHANNEL_GPU_ECC_DBE",
        "Double Bit ECC Error",
        Bucket.WORKFLOW_XID_48,
        action=Action.RESET_GPU,
        note="Alone: reset_gpu; with XID 63 or 64 on the same GPU: drain_and_reset.",
    ),
    _row(
        49,
        "SILENT_RUNNING_CONSTANT_LEVEL_SET_BY_REGISTRY",
        "Unused on Ampere and newer",
        Bucket.CONTACT_SUPPORT,
    ),
    _row(
        50,
        "SILENT_RUNNING_LEVEL_TRANSITION_DUE_TO_RC_ERROR",
        "Unused on Ampere and newer",
        Bucket.CONTACT_SUPPORT,
    ),
    _row(51, "SILENT_RUNNING_STRESS_TEST_FAILURE", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(
        52,
        "SILENT_RUNNING_LEVEL_TRANS_DUE_TO_TEMP_RISE",
        "Unused on Ampere and newer",
        Bucket.CONTACT_SUPPORT,
    ),
    _row(53, "SILENT_RUNNING_TEMP_REDUCED_CLOCKING", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(
        54,
        "SILENT_RUNNING_PWR_REDUCED_CLOCKING",
        "Auxiliary power is not connected to the GPU board",
        Bucket.CHECK_MECHANICALS,
        action=Action.REPLACE,
        note="CHECK_MECHANICALS: reseat / reconnect power; needs a human at the machine.",
    ),
    _row(55, "SILENT_RUNNING_TEMPERATURE_READ_ERROR", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(56, "DISPLAY_CHANNEL_EXCEPTION", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(57, "FB_LINK_TRAINING_FAILURE_ERROR", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(58, "FB_MEMORY_ERROR", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(59, "PMU_ERROR", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(60, "ROBUST_CHANNEL_SEC2_ERROR", "Video processor exception", Bucket.RESTART_APP),
    _row(61, "PMU_BREAKPOINT", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(62, "PMU_HALT_ERROR", "Internal micro-controller halt", Bucket.RESET_GPU),
    _row(
        63,
        "INFOROM_DRAM_RETIREMENT_EVENT",
        "GPU memory remapping event",
        Bucket.IGNORE,
        note="Remap / retirement recorded; ROW_REMAP_* and RETIRED_PAGES_* watch the counters.",
    ),
    _row(
        64,
        "INFOROM_DRAM_RETIREMENT_FAILURE",
        "GPU memory remapping failure",
        Bucket.RESET_GPU,
        note="Repeats on one GPU (xid.xid64_repeat_threshold): xid.xid64_repeat_action (replace).",
    ),
    _row(65, "ROBUST_CHANNEL_NVENC1_ERROR", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(66, "ROBUST_CHANNEL_FECS_ERR_REG_ACCESS_VIOLATION", "Illegal access by driver", Bucket.IGNORE),
    _row(67, "ROBUST_CHANNEL_FECS_ERR_VERIF_VIOLATION", "Illegal access by driver", Bucket.IGNORE),
    _row(68, "ROBUST_CHANNEL_NVDEC0_ERROR", "NVDEC0 Exception", Bucket.RESTART_APP),
    _row(69, "ROBUST_CHANNEL_GR_CLASS_ERROR", "Graphics Engine class error", Bucket.RESTART_APP),
    _row(70, "ROBUST_CHANNEL_CE3_ERROR", "CE3: Unknown Error", Bucket.RESTART_APP),
    _row(71, "ROBUST_CHANNEL_CE4_ERROR", "CE4: Unknown Error", Bucket.RESTART_APP),
    _row(72, "ROBUST_CHANNEL_CE5_ERROR", "CE5: Unknown Error", Bucket.RESTART_APP),
    _row(73, "ROBUST_CHANNEL_NVENC2_ERROR", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(
        74,
        "NVLINK_ERROR",
        "NVLINK Error",
        Bucket.WORKFLOW_NVLINK_ERR,
        action=Action.RESET_GPU,
        note="A GPU reset or node reboot clears it (NVIDIA); the fault may be the peer's.",
    ),
    _row(75, "ROBUST_CHANNEL_CE6_ERROR", "CE6: Unknown Error", Bucket.RESTART_APP),
    _row(76, "ROBUST_CHANNEL_CE7_ERROR", "CE7: Unknown Error", Bucket.RESTART_APP),
    _row(77, "ROBUST_CHANNEL_CE8_ERROR", "CE8: Unknown Error", Bucket.RESTART_APP),
    _row(
        78,
        "VGPU_START_ERROR",
        "vGPU Start Error",
        Bucket.UPDATE_SWFW,
        action=Action.REPLACE,
        note="UPDATE_SWFW: driver / firmware update needed; waits for a human.",
    ),
    _row(79, "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS", "GPU has fallen off the bus", Bucket.RESTART_BM),
    _row(80, "PBDMA_PUSHBUFFER_CRC_MISMATCH", "Corrupted data sent to GPU", Bucket.RESTART_APP),
    _row(81, "ROBUST_CHANNEL_VGA_SUBSYSTEM_ERROR", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(82, "ROBUST_CHANNEL_NVJPG0_ERROR", "NVJPG0 Error", Bucket.RESTART_APP),
    _row(83, "ROBUST_CHANNEL_NVDEC1_ERROR", "NVDEC1 Error", Bucket.RESTART_APP),
    _row(84, "ROBUST_CHANNEL_NVDEC2_ERROR", "NVDEC2 Error", Bucket.RESTART_APP),
    _row(85, "ROBUST_CHANNEL_CE9_ERROR", "CE9: Unknown Error", Bucket.RESTART_APP),
    _row(86, "ROBUST_CHANNEL_OFA0_ERROR", "OFA Exception", Bucket.RESTART_APP),
    _row(87, "NVTELEMETRY_DRIVER_REPORT", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(88, "ROBUST_CHANNEL_NVDEC3_ERROR", "NVDEC3 Error", Bucket.RESTART_APP),
    _row(89, "ROBUST_CHANNEL_NVDEC4_ERROR", "NVDEC4 Error", Bucket.RESTART_APP),
    _row(90, "LTC_ERROR", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(91, "RESERVED_XID", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(92, "EXCESSIVE_SBE_INTERRUPTS", "High single-bit ECC error rate", Bucket.IGNORE),
    _row(
        93,
        "INFOROM_ERASE_LIMIT_EXCEEDED",
        "Non-fatal violation of provisioned InfoROM wear limit",
        Bucket.IGNORE,
    ),
    _row(94, "ROBUST_CHANNEL_CONTAINED_ERROR", "Contained memory error", Bucket.RESTART_APP),
    _row(95, "ROBUST_CHANNEL_UNCONTAINED_ERROR", "Uncontained memory error", Bucket.RESET_GPU),
    _row(96, "ROBUST_CHANNEL_NVDEC5_ERROR", "NVDEC5 Error", Bucket.RESTART_APP),
    _row(97, "ROBUST_CHANNEL_NVDEC6_ERROR", "NVDEC6 Error", Bucket.RESTART_APP),
    _row(98, "ROBUST_CHANNEL_NVDEC7_ERROR", "NVDEC7 Error", Bucket.RESTART_APP),
    _row(99, "ROBUST_CHANNEL_NVJPG1_ERROR", "NVJPG1 Error", Bucket.RESTART_APP),
    _row(100, "ROBUST_CHANNEL_NVJPG2_ERROR", "NVJPG2 Error", Bucket.RESTART_APP),
    _row(101, "ROBUST_CHANNEL_NVJPG3_ERROR", "NVJPG3 Error", Bucket.RESTART_APP),
    _row(102, "ROBUST_CHANNEL_NVJPG4_ERROR", "NVJPG4 Error", Bucket.RESTART_APP),
    _row(103, "ROBUST_CHANNEL_NVJPG5_ERROR", "NVJPG5 Error", Bucket.RESTART_APP),
    _row(104, "ROBUST_CHANNEL_NVJPG6_ERROR", "NVJPG6 Error", Bucket.RESTART_APP),
    _row(105, "ROBUST_CHANNEL_NVJPG7_ERROR", "NVJPG7 Error", Bucket.RESTART_APP),
    _row(106, "SMBPBI_TEST_MESSAGE", "SMBPBI Test Message", Bucket.IGNORE),
    _row(107, "SMBPBI_TEST_MESSAGE_SILENT", "SMBPBI Test Message Silent", Bucket.IGNORE),
    _row(108, "NVLINK_REMOTE_TRANSLATION_ERROR", "Unused on Ampere and newer", Bucket.IGNORE),
    _row(109, "ROBUST_CHANNEL_CTXSW_TIMEOUT_ERROR", "Context Switch Timeout Error", Bucket.RESET_GPU),
    _row(110, "SEC_FAULT_ERROR", "Security Fault Error", Bucket.RESET_GPU),
    _row(111, "BUNDLE_ERROR_EVENT", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(112, "DISP_SUPERVISOR_ERROR", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(113, "DP_LT_FAILURE", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(114, "HEAD_RG_UNDERFLOW", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(115, "CORE_CHANNEL_REGS", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(116, "WINDOW_CHANNEL_REGS", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(117, "CURSOR_CHANNEL_REGS", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(118, "HEAD_REGS", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(119, "GSP_RPC_TIMEOUT", "GSP RPC Timeout", Bucket.RESET_GPU),
    _row(120, "GSP_ERROR", "GSP Error", Bucket.RESET_GPU),
    _row(121, "C2C_ERROR", "C2C Error", Bucket.IGNORE),
    _row(122, "SPI_PMU_RPC_READ_FAIL", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(123, "SPI_PMU_RPC_WRITE_FAIL", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(124, "SPI_PMU_RPC_ERASE_FAIL", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(125, "INFOROM_FS_ERROR", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(126, "ROBUST_CHANNEL_CE10_ERROR", "CE10: Unknown Error", Bucket.RESTART_APP),
    _row(127, "ROBUST_CHANNEL_CE11_ERROR", "CE11: Unknown Error", Bucket.RESTART_APP),
    _row(128, "ROBUST_CHANNEL_CE12_ERROR", "CE12: Unknown Error", Bucket.RESTART_APP),
    _row(129, "ROBUST_CHANNEL_CE13_ERROR", "CE13: Unknown Error", Bucket.RESTART_APP),
    _row(130, "ROBUST_CHANNEL_CE14_ERROR", "CE14: Unknown Error", Bucket.RESTART_APP),
    _row(131, "ROBUST_CHANNEL_CE15_ERROR", "CE15: Unknown Error", Bucket.RESTART_APP),
    _row(132, "ROBUST_CHANNEL_CE16_ERROR", "CE16: Unknown Error", Bucket.RESTART_APP),
    _row(133, "ROBUST_CHANNEL_CE17_ERROR", "CE17: Unknown Error", Bucket.RESTART_APP),
    _row(134, "ROBUST_CHANNEL_CE18_ERROR", "CE18: Unknown Error", Bucket.RESTART_APP),
    _row(135, "ROBUST_CHANNEL_CE19_ERROR", "CE19: Unknown Error", Bucket.RESTART_APP),
    _row(136, "ALI_TRAINING_FAIL", "Link Training Failed", Bucket.RESET_GPU),
    _row(137, "NVLINK_PRIV_ERR", "NVLink Privilege Error", Bucket.IGNORE),
    _row(138, "ROBUST_CHANNEL_DLA_ERROR", "Unused on Ampere and newer", Bucket.CONTACT_SUPPORT),
    _row(139, "ROBUST_CHANNEL_OFA1_ERROR", "OFA1 Error", Bucket.RESTART_APP),
    _row(140, "UNRECOVERABLE_ECC_ERROR_ESCAPE", "ECC Unrecovered Error", Bucket.RESET_GPU),
    _row(141, "ROBUST_CHANNEL_FAST_PATH_ERROR", "CUDA Fast Path Error", Bucket.IGNORE),
    _row(142, "ROBUST_CHANNEL_NVENC3_ERROR", "NVENC3 Error", Bucket.CONTACT_SUPPORT),
    _row(143, "GPU_INIT_ERROR", "GPU Initialization Error", Bucket.RESET_GPU),
    _row(
        144,
        "NVLINK_SAW_ERROR",
        "NVLINK: SAW Error",
        Bucket.WORKFLOW_NVLINK5_ERR,
        action=Action.RESET_GPU,
        note="By the decode sheet's error status (checks/xid_nvlink5.py); else the Fatal / Nonfatal word.",
    ),
    _row(
        145,
        "NVLINK_RLW_ERROR",
        "NVLINK: RLW Error",
        Bucket.WORKFLOW_NVLINK5_ERR,
        action=Action.RESET_GPU,
        note="By the decode sheet's error status (checks/xid_nvlink5.py); else the Fatal / Nonfatal word.",
    ),
    _row(
        146,
        "NVLINK_TLW_ERROR",
        "NVLINK: TLW Error",
        Bucket.WORKFLOW_NVLINK5_ERR,
        action=Action.RESET_GPU,
        note="By the decode sheet's error status (checks/xid_nvlink5.py); else the Fatal / Nonfatal word.",
    ),
    _row(
        147,
        "NVLINK_TREX_ERROR",
        "NVLINK: TREX Error",
        Bucket.WORKFLOW_NVLINK5_ERR,
        action=Action.RESET_GPU,
        note="By the decode sheet's error status (checks/xid_nvlink5.py); else the Fatal / Nonfatal word.",
    ),
    _row(
        148,
        "NVLINK_NVLPW_CTRL_ERROR",
        "NVLINK: NVLPW_CTRL Error",
        Bucket.WORKFLOW_NVLINK5_ERR,
        action=Action.RESET_GPU,
        note="By the decode sheet's error status (checks/xid_nvlink5.py); else the Fatal / Nonfatal word.",
    ),
    _row(
        149,
        "NVLINK_NETIR_ERROR",
        "NVLINK: NETIR Error",
        Bucket.WORKFLOW_NVLINK5_ERR,
        action=Action.RESET_GPU,
        note="By the decode sheet's error status (checks/xid_nvlink5.py); else the Fatal / Nonfatal word.",
    ),
    _row(
        150,
        "NVLINK_MSE_ERROR",
        "NVLINK: MSE Error",
        Bucket.WORKFLOW_NVLINK5_ERR,
        action=Action.RESET_GPU,
        note="By the decode sheet's error status (checks/xid_nvlink5.py); else the Fatal / Nonfatal word.",
    ),
    _row(151, "ROBUST_CHANNEL_KEY_ROTATION_ERROR", "Key rotation Error", Bucket.RESTART_VM),
    _row(152, "ROBUST_CHANNEL_DLA_SMMU_ERROR", "DLA SMMU Error", Bucket.IGNORE),
    _row(153, "ROBUST_CHANNEL_DLA_TIMEOUT", "DLA timeout Error", Bucket.IGNORE),
    _row(
        154,
        "GPU_RECOVERY_ACTION_CHANGED",
        "GPU Recovery Action Changed",
        Bucket.XID_154,
        action=Action.RESET_GPU,
        note="Follows the action its message names, else recovery_action; reset_gpu if neither.",
    ),
    _row(155, "NVLINK_SW_DEFINED_ERROR", "NVLINK: SW Defined Error", Bucket.RESET_GPU),
    _row(156, "RESOURCE_RETIREMENT_EVENT", "Resource Retirement Event", Bucket.RESET_GPU),
    _row(157, "RESOURCE_RETIREMENT_FAILURE", "Resource Retirement Failure", Bucket.IGNORE),
    _row(158, "GPU_FATAL_TIMEOUT", "GPU Fatal Timeout", Bucket.RESET_GPU),
    _row(
        159,
        "ROBUST_CHANNEL_CHI_NON_DATA_ERROR",
        "CHI Non-Data Error",
        Bucket.CHECK_UVM,
        action=Action.RESET_GPU,
        note="CHECK_UVM means RESET_GPU when UVM is in use, as every CUDA workload is.",
    ),
    _row(160, "CHANNEL_RETIREMENT_EVENT", "Channel Retirement Event", Bucket.IGNORE),
    _row(161, "CHANNEL_RETIREMENT_FAILURE", "Channel Retirement Failure", Bucket.IGNORE),
    _row(
        162,
        "PSHC_REENGAGED",
        "Power Smoothing HW Circuitry capability reengaged",
        Bucket.NOT_GIVEN,
        action=Action.NONE,
        note="No bucket given; informational (power smoothing back on).",
    ),
    _row(
        163,
        "PSHC_DISENGAGED",
        "Power Smoothing HW Circuitry capability disengaged",
        Bucket.NOT_GIVEN,
        action=Action.NONE,
        note="No bucket given; NVIDIA: no GPU reset required.",
    ),
    _row(
        164,
        "PSHC_LOW_LIFETIME",
        "Power Smoothing HW Circuitry low lifetime reached",
        Bucket.NOT_GIVEN,
        action=Action.NONE,
        note="No bucket given; NVIDIA: monitor power swings, replace only if smoothing is needed.",
    ),
    _row(
        165,
        "PSHC_ZERO_LIFETIME",
        "Power Smoothing HW Circuitry lifetime exhausted",
        Bucket.NOT_GIVEN,
        action=Action.NONE,
        note="No bucket given; compute is unaffected; replacement is a planning decision.",
    ),
    _row(
        166,
        "NVLINK_SECURE_CRYPTO_ERR",
        "Confidential-computing traffic before the link was set up for encryption",
        Bucket.NOT_GIVEN,
        action=Action.RESET_GPU,
        note="No bucket given; confidential-computing link fault: re-initialise the GPU.",
    ),
    _row(
        167,
        "PCIE_FATAL_TIMEOUT",
        "Fatal PCIe timeout",
        Bucket.NOT_GIVEN,
        action=Action.REBOOT,
        note="No bucket given; a fatal PCIe timeout is handled like XID 79 (RESTART_BM).",
    ),
    _row(
        168,
        "REDUCED_GPU_MEMORY_CAPACITY",
        "Errors found in WPR (write protected region)",
        Bucket.NOT_GIVEN,
        action=Action.REBOOT,
        note="No bucket given; NVIDIA: enable ECC or boot again with a shifted WPR.",
    ),
    _row(
        169,
        "SEC2_HALT_ERROR",
        "Internal micro-controller halt",
        Bucket.NOT_GIVEN,
        action=Action.RESET_GPU,
        note="No bucket given; micro-controller halt, handled like XID 62 (RESET_GPU).",
    ),
    _row(
        170,
        "NVLINK_SECURE_OTHER",
        "Interrupt seen in CC mode",
        Bucket.NOT_GIVEN,
        action=Action.RESET_GPU,
        note="No bucket given; confidential-computing link fault: re-initialise the GPU.",
    ),
    _row(
        171,
        "UNCORRECTABLE_DRAM_ERROR",
        "Detail of an XID 48 (uncorrectable error, DRAM or SRAM)",
        Bucket.NOT_GIVEN,
        action=Action.RESET_GPU,
        note="No bucket given; detail of an XID 48 (DRAM), handled like XID 48 alone.",
    ),
    _row(
        172,
        "UNCORRECTABLE_SRAM_ERROR",
        "Detail of an XID 48 (uncorrectable error, DRAM or SRAM)",
        Bucket.NOT_GIVEN,
        action=Action.RESET_GPU,
        note="No bucket given; detail of an XID 48 (SRAM), handled like XID 48 alone.",
    ),
)

CATALOGUE: dict[int, XidEntry] = {entry.xid: entry for entry in _ROWS}
"""Every XID of NVIDIA's catalogue, keyed by number. NVML's 999 ("unknown XID") is deliberately absent."""

UNKNOWN_XID = 999
"""What NVML's event set reports for an XID it cannot classify."""


def lookup(xid: int) -> XidEntry | None:
    """The catalogue row for an XID, or None when NVIDIA does not list it (including 999)."""
    return CATALOGUE.get(xid)
