/* list.h — the one intrusive doubly linked list, for every list whose nodes have `next`
 * and `prev` fields (spans in a heap's bins and the abandoned lists, superslabs in the
 * pool). Macros so that one body serves each node type, with the type checking of the
 * expressions they expand to. A node not on a list has both links NULL. */
#ifndef HAKMEM_LIST_H
#define HAKMEM_LIST_H

/* Push node n at the front of the list whose head pointer is *head. */
#define HAK_LIST_PUSH(head, n) do {                                                      \
        (n)->prev = NULL;                                                                \
        (n)->next = *(head);                                                             \
        if (*(head) != NULL) (*(head))->prev = (n);                                      \
        *(head) = (n);                                                                   \
    } while (0)

/* Unlink node n from the list whose head pointer is *head; n's links become NULL. */
#define HAK_LIST_REMOVE(head, n) do {                                                    \
        if ((n)->prev != NULL) (n)->prev->next = (n)->next; else *(head) = (n)->next;   \
        if ((n)->next != NULL) (n)->next->prev = (n)->prev;                              \
        (n)->next = (n)->prev = NULL;                                                    \
    } while (0)

#endif
