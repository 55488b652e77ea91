# TESSERA_SANITIZE=address -> ASan + UBSan; TESSERA_SANITIZE=thread -> TSan.
# Applied globally so that every library and test is instrumented alike.
if(TESSERA_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(TESSERA_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  add_link_options(-fsanitize=thread)
elseif(NOT TESSERA_SANITIZE STREQUAL "")
  message(FATAL_ERROR "TESSERA_SANITIZE must be empty, 'address' or 'thread' (got '${TESSERA_SANITIZE}')")
endif()
