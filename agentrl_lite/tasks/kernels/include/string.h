/* The string.h a cpu_c kernel compiles against: the memory functions a kernel may import. */
#ifndef AGENTRL_STRING_H
#define AGENTRL_STRING_H

typedef __SIZE_TYPE__ size_t;
void* memcpy(void* restrict dst, const void* restrict src, size_t n);
void* memmove(void* dst, const void* src, size_t n);
void* memset(void* dst, int c, size_t n);

#endif
