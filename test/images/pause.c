/* The lab's pod sandbox ("pause") image: holds the pod's namespaces open,
 * reaps the zombies of a shared PID namespace, and exits on SIGTERM/SIGINT.
 * Linked statically: the image holds this one file and nothing else. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) {
  (void)sig;
  _exit(0);
}

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(int argc, char** argv) {
  if (argc > 1 && argv[1][0] == '-') {
    fprintf(stderr, "gracekeeper lab pause: takes no options\n");
    return 2;
  }
  if (getpid() != 1) {
    fprintf(stderr, "gracekeeper lab pause: warning: not PID 1\n");
  }
  struct sigaction stop = {.sa_handler = on_stop};
  struct sigaction child = {.sa_handler = on_child, .sa_flags = SA_NOCLDSTOP};
  sigemptyset(&stop.sa_mask);
  sigemptyset(&child.sa_mask);
  if (sigaction(SIGINT, &stop, NULL) < 0 || sigaction(SIGTERM, &stop, NULL) < 0 ||
      sigaction(SIGCHLD, &child, NULL) < 0) {
    perror("sigaction");
    return 1;
  }
  for (;;) {
    pause();
  }
}
