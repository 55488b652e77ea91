/*
 * tessera's declaration of the subset of the NVIDIA Management Library (NVML)
 * C API that tessera implements (src/sim) and intercepts (src/vgpu).
 *
 * Written for tessera from NVIDIA's published NVML API reference; it is not
 * NVIDIA's header. Types, enum values, struct layouts, versioned struct
 * constants and exported symbol names follow the real ABI, so a program
 * compiled against this header runs against the real libnvidia-ml.so.1 and a
 * program compiled against NVIDIA's header runs against tessera's simulator.
 *
 * As in NVIDIA's header, the unversioned names of functions that have
 * versioned ABI entry points are mapped to those (nvmlInit -> nvmlInit_v2, ...)
 * unless NVML_NO_UNVERSIONED_FUNC_DEFS is defined; implementations define it
 * and export both names.
 *
 * Thread-safety: as documented by NVIDIA, every function is thread-safe.
 */
#ifndef TESSERA_NVML_H_
#define TESSERA_NVML_H_

#ifdef __cplusplus
extern "C" {
#endif

#define NVML_API_VERSION 12
#define NVML_API_VERSION_STR "12"

/* ------------------------------------------------------------------------ */
/* Handles                                                                  */
/* ------------------------------------------------------------------------ */
typedef struct nvmlDevice_st* nvmlDevice_t;
typedef struct nvmlGpuInstance_st* nvmlGpuInstance_t;
typedef struct nvmlComputeInstance_st* nvmlComputeInstance_t;
typedef struct nvmlEventSet_st* nvmlEventSet_t;
typedef struct nvmlUnit_st* nvmlUnit_t;

/* Versioned structs carry sizeof(struct) | (version << 24) in their first field. */
#define NVML_STRUCT_VERSION(data, ver) \
  (unsigned int)(sizeof(nvml##data##_v##ver##_t) | (unsigned int)((ver) << 24U))

/* ------------------------------------------------------------------------ */
/* Buffer sizes                                                             */
/* ------------------------------------------------------------------------ */
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16
#define NVML_DEVICE_UUID_BUFFER_SIZE 80
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_DEVICE_NAME_BUFFER_SIZE 64
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_DEVICE_SERIAL_BUFFER_SIZE 30
#define NVML_DEVICE_PART_NUMBER_BUFFER_SIZE 80
#define NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE 32
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE 80
#define NVML_NVLINK_MAX_LINKS 18
#define NVML_MAX_PHYSICAL_BRIDGE 128
#define NVML_VALUE_NOT_AVAILABLE (-1)

/* nvmlDeviceGetPciInfo's legacy bus id format and the current one. */
#define NVML_DEVICE_PCI_BUS_ID_LEGACY_FMT "%04X:%02X:%02X.0"
#define NVML_DEVICE_PCI_BUS_ID_FMT "%08X:%02X:%02X.0"

/* ------------------------------------------------------------------------ */
/* Return codes                                                             */
/* ------------------------------------------------------------------------ */
typedef enum nvmlReturn_enum {
  NVML_SUCCESS = 0,
  NVML_ERROR_UNINITIALIZED = 1,
  NVML_ERROR_INVALID_ARGUMENT = 2,
  NVML_ERROR_NOT_SUPPORTED = 3,
  NVML_ERROR_NO_PERMISSION = 4,
  NVML_ERROR_ALREADY_INITIALIZED = 5,
  NVML_ERROR_NOT_FOUND = 6,
  NVML_ERROR_INSUFFICIENT_SIZE = 7,
  NVML_ERROR_INSUFFICIENT_POWER = 8,
  NVML_ERROR_DRIVER_NOT_LOADED = 9,
  NVML_ERROR_TIMEOUT = 10,
  NVML_ERROR_IRQ_ISSUE = 11,
  NVML_ERROR_LIBRARY_NOT_FOUND = 12,
  NVML_ERROR_FUNCTION_NOT_FOUND = 13,
  NVML_ERROR_CORRUPTED_INFOROM = 14,
  NVML_ERROR_GPU_IS_LOST = 15,
  NVML_ERROR_RESET_REQUIRED = 16,
  NVML_ERROR_OPERATING_SYSTEM = 17,
  NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
  NVML_ERROR_IN_USE = 19,
  NVML_ERROR_MEMORY = 20,
  NVML_ERROR_NO_DATA = 21,
  NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
  NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
  NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
  NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
  NVML_ERROR_DEPRECATED = 26,
  NVML_ERROR_NOT_READY = 27,
  NVML_ERROR_GPU_NOT_FOUND = 28,
  NVML_ERROR_INVALID_STATE = 29,
  NVML_ERROR_UNKNOWN = 999
} nvmlReturn_t;

/* ------------------------------------------------------------------------ */
/* Enums                                                                    */
/* ------------------------------------------------------------------------ */
typedef enum nvmlEnableState_enum { NVML_FEATURE_DISABLED = 0, NVML_FEATURE_ENABLED = 1 } nvmlEnableState_t;

typedef enum nvmlTemperatureSensors_enum {
  NVML_TEMPERATURE_GPU = 0,
  NVML_TEMPERATURE_COUNT
} nvmlTemperatureSensors_t;

typedef enum nvmlTemperatureThresholds_enum {
  NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0,
  NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1,
  NVML_TEMPERATURE_THRESHOLD_MEM_MAX = 2,
  NVML_TEMPERATURE_THRESHOLD_GPU_MAX = 3,
  NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MIN = 4,
  NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_CURR = 5,
  NVML_TEMPERATURE_THRESHOLD_ACOUSTIC_MAX = 6,
  NVML_TEMPERATURE_THRESHOLD_GPS_CURR = 7,
  NVML_TEMPERATURE_THRESHOLD_COUNT
} nvmlTemperatureThresholds_t;

typedef enum nvmlClockType_enum {
  NVML_CLOCK_GRAPHICS = 0,
  NVML_CLOCK_SM = 1,
  NVML_CLOCK_MEM = 2,
  NVML_CLOCK_VIDEO = 3,
  NVML_CLOCK_COUNT
} nvmlClockType_t;

typedef enum nvmlClockId_enum {
  NVML_CLOCK_ID_CURRENT = 0,
  NVML_CLOCK_ID_APP_CLOCK_TARGET = 1,
  NVML_CLOCK_ID_APP_CLOCK_DEFAULT = 2,
  NVML_CLOCK_ID_CUSTOMER_BOOST_MAX = 3,
  NVML_CLOCK_ID_COUNT
} nvmlClockId_t;

typedef enum nvmlComputeMode_enum {
  NVML_COMPUTEMODE_DEFAULT = 0,
  NVML_COMPUTEMODE_EXCLUSIVE_THREAD = 1,
  NVML_COMPUTEMODE_PROHIBITED = 2,
  NVML_COMPUTEMODE_EXCLUSIVE_PROCESS = 3,
  NVML_COMPUTEMODE_COUNT
} nvmlComputeMode_t;

typedef enum nvmlPStates_enum {
  NVML_PSTATE_0 = 0,
  NVML_PSTATE_1 = 1,
  NVML_PSTATE_2 = 2,
  NVML_PSTATE_3 = 3,
  NVML_PSTATE_4 = 4,
  NVML_PSTATE_5 = 5,
  NVML_PSTATE_6 = 6,
  NVML_PSTATE_7 = 7,
  NVML_PSTATE_8 = 8,
  NVML_PSTATE_9 = 9,
  NVML_PSTATE_10 = 10,
  NVML_PSTATE_11 = 11,
  NVML_PSTATE_12 = 12,
  NVML_PSTATE_13 = 13,
  NVML_PSTATE_14 = 14,
  NVML_PSTATE_15 = 15,
  NVML_PSTATE_UNKNOWN = 32
} nvmlPstates_t;

typedef enum nvmlBrandType_enum {
  NVML_BRAND_UNKNOWN = 0,
  NVML_BRAND_QUADRO = 1,
  NVML_BRAND_TESLA = 2,
  NVML_BRAND_NVS = 3,
  NVML_BRAND_GRID = 4,
  NVML_BRAND_GEFORCE = 5,
  NVML_BRAND_TITAN = 6,
  NVML_BRAND_NVIDIA_VAPPS = 7,
  NVML_BRAND_NVIDIA_VPC = 8,
  NVML_BRAND_NVIDIA_VCS = 9,
  NVML_BRAND_NVIDIA_VWS = 10,
  NVML_BRAND_NVIDIA_CLOUD_GAMING = 11,
  NVML_BRAND_NVIDIA_VGAMING = NVML_BRAND_NVIDIA_CLOUD_GAMING,
  NVML_BRAND_QUADRO_RTX = 12,
  NVML_BRAND_NVIDIA_RTX = 13,
  NVML_BRAND_NVIDIA = 14,
  NVML_BRAND_GEFORCE_RTX = 15,
  NVML_BRAND_TITAN_RTX = 16,
  NVML_BRAND_COUNT
} nvmlBrandType_t;

typedef unsigned int nvmlDeviceArchitecture_t;
#define NVML_DEVICE_ARCH_KEPLER 2
#define NVML_DEVICE_ARCH_MAXWELL 3
#define NVML_DEVICE_ARCH_PASCAL 4
#define NVML_DEVICE_ARCH_VOLTA 5
#define NVML_DEVICE_ARCH_TURING 6
#define NVML_DEVICE_ARCH_AMPERE 7
#define NVML_DEVICE_ARCH_ADA 8
#define NVML_DEVICE_ARCH_HOPPER 9
#define NVML_DEVICE_ARCH_BLACKWELL 10
#define NVML_DEVICE_ARCH_UNKNOWN 0xffffffff

/* Topology: how far apart two GPUs are on the PCIe/NUMA tree. */
typedef enum nvmlGpuLevel_enum {
  NVML_TOPOLOGY_INTERNAL = 0,
  NVML_TOPOLOGY_SINGLE = 10,
  NVML_TOPOLOGY_MULTIPLE = 20,
  NVML_TOPOLOGY_HOSTBRIDGE = 30,
  NVML_TOPOLOGY_NODE = 40,
  NVML_TOPOLOGY_SYSTEM = 50
} nvmlGpuTopologyLevel_t;

typedef enum nvmlGpuP2PStatus_enum {
  NVML_P2P_STATUS_OK = 0,
  NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED = 1,
  NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED = NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED,
  NVML_P2P_STATUS_GPU_NOT_SUPPORTED = 2,
  NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED = 3,
  NVML_P2P_STATUS_DISABLED_BY_REGKEY = 4,
  NVML_P2P_STATUS_NOT_SUPPORTED = 5,
  NVML_P2P_STATUS_UNKNOWN = 6
} nvmlGpuP2PStatus_t;

typedef enum nvmlGpuP2PCapsIndex_enum {
  NVML_P2P_CAPS_INDEX_READ = 0,
  NVML_P2P_CAPS_INDEX_WRITE = 1,
  NVML_P2P_CAPS_INDEX_NVLINK = 2,
  NVML_P2P_CAPS_INDEX_ATOMICS = 3,
  NVML_P2P_CAPS_INDEX_PCI = 4,
  NVML_P2P_CAPS_INDEX_PROP = 4,
  NVML_P2P_CAPS_INDEX_UNKNOWN = 5
} nvmlGpuP2PCapsIndex_t;

typedef enum nvmlSamplingType_enum {
  NVML_TOTAL_POWER_SAMPLES = 0,
  NVML_GPU_UTILIZATION_SAMPLES = 1,
  NVML_MEMORY_UTILIZATION_SAMPLES = 2,
  NVML_ENC_UTILIZATION_SAMPLES = 3,
  NVML_DEC_UTILIZATION_SAMPLES = 4,
  NVML_PROCESSOR_CLK_SAMPLES = 5,
  NVML_MEMORY_CLK_SAMPLES = 6,
  NVML_MODULE_POWER_SAMPLES = 7,
  NVML_JPG_UTILIZATION_SAMPLES = 8,
  NVML_OFA_UTILIZATION_SAMPLES = 9,
  NVML_SAMPLINGTYPE_COUNT
} nvmlSamplingType_t;

typedef enum nvmlValueType_enum {
  NVML_VALUE_TYPE_DOUBLE = 0,
  NVML_VALUE_TYPE_UNSIGNED_INT = 1,
  NVML_VALUE_TYPE_UNSIGNED_LONG = 2,
  NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
  NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4,
  NVML_VALUE_TYPE_SIGNED_INT = 5,
  NVML_VALUE_TYPE_UNSIGNED_SHORT = 6,
  NVML_VALUE_TYPE_COUNT
} nvmlValueType_t;

/* ------------------------------------------------------------------------ */
/* Structs                                                                  */
/* ------------------------------------------------------------------------ */
typedef struct nvmlPciInfo_st {
  char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE]; /* "domain:bus:device.function", 4-digit domain */
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;                       /* combined 16-bit device id and 16-bit vendor id */
  unsigned int pciSubSystemId;                    /* 16-bit sub-system device id and 16-bit sub-vendor id */
  char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE]; /* "domain:bus:device.function", 8-digit domain */
} nvmlPciInfo_t;

typedef struct nvmlMemory_st {
  unsigned long long total; /* bytes */
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_t;

typedef struct nvmlMemory_v2_st {
  unsigned int version; /* set to nvmlMemory_v2 */
  unsigned long long total;
  unsigned long long reserved; /* reserved by the driver and firmware */
  unsigned long long free;
  unsigned long long used;
} nvmlMemory_v2_t;
#define nvmlMemory_v2 NVML_STRUCT_VERSION(Memory, 2)

typedef struct nvmlBAR1Memory_st {
  unsigned long long bar1Total;
  unsigned long long bar1Free;
  unsigned long long bar1Used;
} nvmlBAR1Memory_t;

typedef struct nvmlUtilization_st {
  unsigned int gpu;    /* percent of the last sample period in which a kernel ran */
  unsigned int memory; /* percent of the last sample period in which memory was read or written */
} nvmlUtilization_t;

typedef struct nvmlProcessInfo_v1_st {
  unsigned int pid;
  unsigned long long usedGpuMemory; /* bytes; NVML_VALUE_NOT_AVAILABLE when unknown */
} nvmlProcessInfo_v1_t;

typedef struct nvmlProcessInfo_v2_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;     /* 0xFFFFFFFF when not in a MIG instance */
  unsigned int computeInstanceId; /* 0xFFFFFFFF when not in a MIG instance */
} nvmlProcessInfo_v2_t;

/* The structure of nvmlDeviceGet*RunningProcesses_v3. */
typedef struct nvmlProcessInfo_st {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct nvmlProcessUtilizationSample_st {
  unsigned int pid;
  unsigned long long timeStamp; /* CPU timestamp in microseconds */
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

typedef union nvmlValue_st {
  double dVal;
  int siVal;
  unsigned int uiVal;
  unsigned long ulVal;
  unsigned long long ullVal;
  signed long long sllVal;
  unsigned short usVal;
} nvmlValue_t;

typedef struct nvmlSample_st {
  unsigned long long timeStamp; /* CPU timestamp in microseconds */
  nvmlValue_t sampleValue;
} nvmlSample_t;

/* ------------------------------------------------------------------------ */
/* Events                                                                   */
/* ------------------------------------------------------------------------ */
#define nvmlEventTypeSingleBitEccError 0x0000000000000001LL
#define nvmlEventTypeDoubleBitEccError 0x0000000000000002LL
#define nvmlEventTypePState 0x0000000000000004LL
#define nvmlEventTypeXidCriticalError 0x0000000000000008LL
#define nvmlEventTypeClock 0x0000000000000010LL
#define nvmlEventTypePowerSourceChange 0x0000000000000080LL
#define nvmlEventMigConfigChange 0x0000000000000100LL
#define nvmlEventTypeNone 0x0000000000000000LL
#define nvmlEventTypeAll                                                                 \
  (nvmlEventTypeNone | nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError | \
   nvmlEventTypePState | nvmlEventTypeClock | nvmlEventTypeXidCriticalError |            \
   nvmlEventTypePowerSourceChange | nvmlEventMigConfigChange)

typedef struct nvmlEventData_st {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData; /* for XID events, the XID number */
  unsigned int gpuInstanceId;   /* 0xFFFFFFFF when the event is not tied to a MIG instance */
  unsigned int computeInstanceId;
} nvmlEventData_t;

/* ------------------------------------------------------------------------ */
/* Multi-Instance GPU                                                       */
/* ------------------------------------------------------------------------ */
#define NVML_DEVICE_MIG_DISABLE 0x0
#define NVML_DEVICE_MIG_ENABLE 0x1

#define NVML_GPU_INSTANCE_PROFILE_1_SLICE 0x0
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE 0x1
#define NVML_GPU_INSTANCE_PROFILE_3_SLICE 0x2
#define NVML_GPU_INSTANCE_PROFILE_4_SLICE 0x3
#define NVML_GPU_INSTANCE_PROFILE_7_SLICE 0x4
#define NVML_GPU_INSTANCE_PROFILE_8_SLICE 0x5
#define NVML_GPU_INSTANCE_PROFILE_6_SLICE 0x6
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 0x7 /* 1 slice with media engines ("+me") */
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1 0x8
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 \
  0x9                                             /* 1 slice with double memory (e.g. 1g.10gb on A100-80GB) */
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX 0xA /* Blackwell and RTX PRO profiles */
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX 0xB
#define NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX 0xC
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME 0xD
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME 0xE
#define NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME 0xF
#define NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME 0x10
#define NVML_GPU_INSTANCE_PROFILE_3_SLICE_GFX 0x11
#define NVML_GPU_INSTANCE_PROFILE_COUNT 0x12

/* nvmlGpuInstanceProfileInfo_v3_t::capabilities */
#define NVML_GPU_INSTANCE_PROFILE_CAPS_P2P 0x1
#define NVML_GPU_INSTANCE_PROFILE_CAPS_GFX 0x2

#define NVML_INVALID_GPU_INSTANCE_PROFILE_ID 0xFFFFFFFF

#define NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE 0x0
#define NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE 0x1
#define NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE 0x2
#define NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE 0x3
#define NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE 0x4
#define NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE 0x5
#define NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE 0x6
#define NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1 0x7
#define NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE_NVL 0x8
#define NVML_COMPUTE_INSTANCE_PROFILE_COUNT 0x9

#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED 0x0
#define NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT 0x1

typedef struct nvmlGpuInstancePlacement_st {
  unsigned int start; /* index of the first memory slice */
  unsigned int size;  /* number of memory slices */
} nvmlGpuInstancePlacement_t;

typedef struct nvmlGpuInstanceProfileInfo_st {
  unsigned int id;
  unsigned int isP2pSupported;
  unsigned int sliceCount;
  unsigned int instanceCount; /* maximum number of instances of this profile */
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
} nvmlGpuInstanceProfileInfo_t;

typedef struct nvmlGpuInstanceProfileInfo_v2_st {
  unsigned int version; /* set to nvmlGpuInstanceProfileInfo_v2 */
  unsigned int id;
  unsigned int isP2pSupported;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE]; /* e.g. "MIG 1g.5gb" */
} nvmlGpuInstanceProfileInfo_v2_t;
#define nvmlGpuInstanceProfileInfo_v2 NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 2)

/* v3: the P2P flag became a capability bit (NVML_GPU_INSTANCE_PROFILE_CAPS_*). */
typedef struct nvmlGpuInstanceProfileInfo_v3_st {
  unsigned int version; /* set to nvmlGpuInstanceProfileInfo_v3 */
  unsigned int id;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
  unsigned int capabilities;
} nvmlGpuInstanceProfileInfo_v3_t;
#define nvmlGpuInstanceProfileInfo_v3 NVML_STRUCT_VERSION(GpuInstanceProfileInfo, 3)

typedef struct nvmlGpuInstanceInfo_st {
  nvmlDevice_t device; /* the parent device */
  unsigned int id;
  unsigned int profileId;
  nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;

typedef struct nvmlComputeInstancePlacement_st {
  unsigned int start;
  unsigned int size;
} nvmlComputeInstancePlacement_t;

typedef struct nvmlComputeInstanceProfileInfo_st {
  unsigned int id;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
} nvmlComputeInstanceProfileInfo_t;

typedef struct nvmlComputeInstanceProfileInfo_v2_st {
  unsigned int version; /* set to nvmlComputeInstanceProfileInfo_v2 */
  unsigned int id;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
} nvmlComputeInstanceProfileInfo_v2_t;
#define nvmlComputeInstanceProfileInfo_v2 NVML_STRUCT_VERSION(ComputeInstanceProfileInfo, 2)

typedef struct nvmlComputeInstanceProfileInfo_v3_st {
  unsigned int version; /* set to nvmlComputeInstanceProfileInfo_v3 */
  unsigned int id;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
  unsigned int capabilities;
} nvmlComputeInstanceProfileInfo_v3_t;
#define nvmlComputeInstanceProfileInfo_v3 NVML_STRUCT_VERSION(ComputeInstanceProfileInfo, 3)

typedef struct nvmlComputeInstanceInfo_st {
  nvmlDevice_t device;
  nvmlGpuInstance_t gpuInstance;
  unsigned int id;
  unsigned int profileId;
  nvmlComputeInstancePlacement_t placement;
} nvmlComputeInstanceInfo_t;

/* ------------------------------------------------------------------------ */
/* Functions                                                                */
/* ------------------------------------------------------------------------ */
#define NVML_INIT_FLAG_NO_GPUS 1
#define NVML_INIT_FLAG_NO_ATTACH 2

/* Initialization and system queries. */
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlInitWithFlags(unsigned int flags);
nvmlReturn_t nvmlShutdown(void);
const char* nvmlErrorString(nvmlReturn_t result);
nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length);
nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length);
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* cudaDriverVersion);
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* cudaDriverVersion);
nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char* name, unsigned int length);

/* Device enumeration and identity. */
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* deviceCount);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* pciBusId, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetHandleBySerial(const char* serial, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length);
nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char* serial, unsigned int length);
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minorNumber);
nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t* type);
nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t* arch);
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int* major, int* minor);
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci);
nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t device, unsigned int* numCores);
nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t* mode);
nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t* mode);

/* Memory and utilization. */
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory);
nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t* bar1Memory);
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization);
/* Per-process utilization since lastSeenTimeStamp (microseconds). With utilization == NULL the
 * number of samples needed is returned in *processSamplesCount with NVML_ERROR_INSUFFICIENT_SIZE. */
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device, nvmlProcessUtilizationSample_t* utilization,
                                             unsigned int* processSamplesCount,
                                             unsigned long long lastSeenTimeStamp);
nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t device, nvmlSamplingType_t type,
                                  unsigned long long lastSeenTimeStamp, nvmlValueType_t* sampleValType,
                                  unsigned int* sampleCount, nvmlSample_t* samples);
/* Running processes. The unsuffixed name is the v1 ABI (nvmlProcessInfo_v1_t). */
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_t* infos);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_v2_t* infos);
/* Processes that use the device through an MPS server (MPS clients); the server
 * itself is a compute process. */
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                        nvmlProcessInfo_t* infos);
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int* infoCount,
                                                        nvmlProcessInfo_v2_t* infos);
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int* infoCount,
                                                      nvmlProcessInfo_t* infos);
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int* infoCount,
                                                      nvmlProcessInfo_v2_t* infos);

/* Health and environment. */
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                      unsigned int* temp);
nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, nvmlTemperatureThresholds_t thresholdType,
                                               unsigned int* temp);
nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int* speed);
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* power); /* milliwatts */
nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int* limit);
nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int* limit);
nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                                 unsigned long long* energy); /* millijoules */
nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t* pState);
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int* clock);
nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int* clock);
nvmlReturn_t nvmlDeviceGetClock(nvmlDevice_t device, nvmlClockType_t clockType, nvmlClockId_t clockId,
                                unsigned int* clockMHz);

/* Topology and affinity. */
nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int* node);
nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize, unsigned long* cpuSet);
nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                 nvmlGpuTopologyLevel_t* pathInfo);
nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                    nvmlGpuP2PCapsIndex_t p2pIndex, nvmlGpuP2PStatus_t* p2pStatus);
nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t* isActive);
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t* pci);

/* Events. */
nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t* set);
nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set);
nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long* eventTypes);
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeoutms);
nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set);

/* Multi-Instance GPU. */
nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode, nvmlReturn_t* activationStatus);
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* currentMode, unsigned int* pendingMode);
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t* info);
/* info->version selects the layout: nvmlGpuInstanceProfileInfo_v2 or _v3. */
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t* info);
nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoByIdV(nvmlDevice_t device, unsigned int profileId,
                                                      nvmlGpuInstanceProfileInfo_v2_t* info);
nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profileId,
                                                           nvmlGpuInstancePlacement_t* placements,
                                                           unsigned int* count);
nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profileId,
                                                       unsigned int* count);
nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId,
                                         nvmlGpuInstance_t* gpuInstance);
nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device, unsigned int profileId,
                                                      const nvmlGpuInstancePlacement_t* placement,
                                                      nvmlGpuInstance_t* gpuInstance);
nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance);
nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId,
                                       nvmlGpuInstance_t* gpuInstances, unsigned int* count);
nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                          nvmlGpuInstance_t* gpuInstance);
nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t* info);
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                          unsigned int engProfile,
                                                          nvmlComputeInstanceProfileInfo_t* info);
/* info->version selects the layout: nvmlComputeInstanceProfileInfo_v2 or _v3. */
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gpuInstance,
                                                           unsigned int profile, unsigned int engProfile,
                                                           nvmlComputeInstanceProfileInfo_v2_t* info);
nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(nvmlGpuInstance_t gpuInstance,
                                                                 unsigned int profileId,
                                                                 nvmlComputeInstancePlacement_t* placements,
                                                                 unsigned int* count);
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t gpuInstance,
                                                                unsigned int profileId, unsigned int* count);
nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                  nvmlComputeInstance_t* computeInstance);
nvmlReturn_t nvmlGpuInstanceCreateComputeInstanceWithPlacement(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId, const nvmlComputeInstancePlacement_t* placement,
    nvmlComputeInstance_t* computeInstance);
nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance);
nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                nvmlComputeInstance_t* computeInstances, unsigned int* count);
nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id,
                                                   nvmlComputeInstance_t* computeInstance);
nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance,
                                           nvmlComputeInstanceInfo_t* info);
nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int* isMigDevice);
nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id);
nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int* id);
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count);
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t* migDevice);
nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t* device);

/* Unversioned names map to the current ABI entry points, as in NVIDIA's header. */
#ifndef NVML_NO_UNVERSIONED_FUNC_DEFS
#define nvmlInit nvmlInit_v2
#define nvmlDeviceGetCount nvmlDeviceGetCount_v2
#define nvmlDeviceGetHandleByIndex nvmlDeviceGetHandleByIndex_v2
#define nvmlDeviceGetHandleByPciBusId nvmlDeviceGetHandleByPciBusId_v2
#define nvmlDeviceGetPciInfo nvmlDeviceGetPciInfo_v3
#define nvmlDeviceGetNvLinkRemotePciInfo nvmlDeviceGetNvLinkRemotePciInfo_v2
#define nvmlDeviceGetComputeRunningProcesses nvmlDeviceGetComputeRunningProcesses_v3
#define nvmlDeviceGetGraphicsRunningProcesses nvmlDeviceGetGraphicsRunningProcesses_v3
#define nvmlDeviceGetMPSComputeRunningProcesses nvmlDeviceGetMPSComputeRunningProcesses_v3
#define nvmlEventSetWait nvmlEventSetWait_v2
#define nvmlDeviceGetGpuInstancePossiblePlacements nvmlDeviceGetGpuInstancePossiblePlacements_v2
#define nvmlComputeInstanceGetInfo nvmlComputeInstanceGetInfo_v2
#endif

/* Older ABI entry points, exported by the library for programs built against older headers.
 * Declared only when NVML_NO_UNVERSIONED_FUNC_DEFS is defined (as NVIDIA's header does). */
#ifdef NVML_NO_UNVERSIONED_FUNC_DEFS
nvmlReturn_t nvmlInit(void);
nvmlReturn_t nvmlDeviceGetCount(unsigned int* deviceCount);
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* pciBusId, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t* pci);
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t* pci);
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t* pci);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int* infoCount,
                                                  nvmlProcessInfo_v1_t* infos);
nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t device, unsigned int* infoCount,
                                                     nvmlProcessInfo_v1_t* infos);
nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int* infoCount,
                                                   nvmlProcessInfo_v1_t* infos);
nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t* data, unsigned int timeoutms);
nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(nvmlDevice_t device, unsigned int profileId,
                                                        nvmlGpuInstancePlacement_t* placements,
                                                        unsigned int* count);
nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance,
                                        nvmlComputeInstanceInfo_t* info);
#endif

#ifdef __cplusplus
}
#endif

#endif /* TESSERA_NVML_H_ */
