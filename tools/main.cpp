#include <cstdio>
int main() { std::puts("tilefmha"); return 0; }
