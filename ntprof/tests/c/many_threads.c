/* A process of N threads: one spins, the others wait in pause(); for the attach test of many threads. */
#include <pthread.h>
#include <unistd.h>
#include <stdlib.h>
static void *park(void *a){ for(;;) pause(); return 0; }
static void *spin(void *a){ volatile unsigned long x=0; for(;;) x++; return 0; }
int main(int c, char **v){ int n=atoi(v[1]); pthread_attr_t at; pthread_attr_init(&at); pthread_attr_setstacksize(&at, 65536);
 pthread_t t; pthread_create(&t,&at,spin,0); for(int i=2;i<n;i++) pthread_create(&t,&at,park,0); pause(); }
