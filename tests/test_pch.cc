// The translation unit that compiles the test executables' shared precompiled header
// (tests/CMakeLists.txt, kvserve_test_pch); it has no code of its own.
