// A fake libnccl.so.2 for the interposer tests: each entry point records "<name> <args>" and
// succeeds. Built with SONAME libnccl.so.2 so the interposer's dlopen(NOLOAD) finds it.
#pragma once

extern "C" {
typedef void (*FakeNcclHook)(const char* event);
void fakeNcclSetHook(FakeNcclHook hook);  // receives every recorded call
void fakeNcclSetVersion(int code);        // what ncclGetVersion reports (default 22809)
}
