/* nvml.h must compile as C11 too: C programs are NVML's most common clients. */
#include <nvml.h>
#include <stddef.h>

_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t layout");
_Static_assert(offsetof(nvmlPciInfo_t, busId) == 36, "nvmlPciInfo_t layout");

unsigned int tessera_nvml_header_c_memory_v2_version(void);
unsigned int tessera_nvml_header_c_memory_v2_version(void) {
  return nvmlMemory_v2;
}
