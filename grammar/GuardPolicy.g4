// GuardPolicy.g4: the v1 guard-filter policy language (see docs/language.md).
//
// A file is a version header, then policies and tests in any order. A policy is a list of
// items; rules are tried in source order and the first one whose condition holds decides.
// The checker (core/src/checker) gives names their meaning: this grammar only fixes shape.
grammar GuardPolicy;

// ---------------------------------------------------------------- file structure

file_
    : header declaration* EOF
    ;

header
    : GUARDPOLICY version=INT
    ;

declaration
    : policyDecl
    | testDecl
    ;

// ---------------------------------------------------------------- policies

// `extends BASE`: BASE's rules after this policy's own, and its `default` and runtime lines
// where this policy has none of the kind (docs/language.md, "Extending a policy").
policyDecl
    : UNSAFE? POLICY name=IDENT paramList? extendsClause? LBRACE policyItem* RBRACE
    ;

extendsClause
    : EXTENDS base=qualifiedName argList?
    ;

paramList
    : LPAREN (param (COMMA param)* COMMA?)? RPAREN
    ;

param
    : name=IDENT COLON type=IDENT (ASSIGN literal)?
    ;

policyItem
    : DOC STRING                                           # docItem
    | decision WHEN expr                                   # ruleItem
    | DEFAULT decision                                     # defaultItem
    | USE target=qualifiedName argList?                    # useItem
    | CONFIG knob=IDENT ASSIGN literal                     # configItem
    | STANCE stanceName=IDENT AFTER calls=INT CALLS              # stanceItem
    | VERIFY EVERY calls=INT CALLS                         # verifyItem
    | ON_VIOLATION action=IDENT                            # onViolationItem
    | ON_RECOMPILE action=IDENT                            # onRecompileItem
    | DISPATCH dispatchMode=IDENT                           # dispatchItem
    | ON_ERROR (decision | action=IDENT)                   # onErrorItem
    ;

// keep: torch checks the guard on every call; drop: never; watch: when the state it reads
// changes (under a plain guard_filter_fn, and in this release's runtime, a keep).
decision
    : KEEP
    | DROP
    | WATCH
    ;

argList
    : LPAREN (arg (COMMA arg)* COMMA?)? RPAREN
    ;

arg
    : name=IDENT ASSIGN literal
    ;

qualifiedName
    : IDENT (DOT IDENT)*
    ;

// ---------------------------------------------------------------- tests

testDecl
    : TEST target=IDENT LBRACE expectation* RBRACE
    ;

expectation
    : EXPECT decision LBRACE (fieldInit (COMMA fieldInit)* COMMA?)? RBRACE
    ;

fieldInit
    : path=fieldPath COLON value=literal
    ;

// ---------------------------------------------------------------- expressions
// Alternatives are listed from the tightest binding to the loosest.

expr
    : LPAREN expr RPAREN                                   # parenExpr
    | literal                                              # literalExpr
    | callee=fieldPath LPAREN (expr (COMMA expr)* COMMA?)? RPAREN  # callExpr
    | fieldPath                                            # pathExpr
    | lhs=expr op=(EQ | NE | LT | LE | GT | GE) rhs=expr   # compareExpr
    | lhs=expr NOT? IN set=setLiteral                      # inExpr
    | lhs=expr op=(CONTAINS | STARTSWITH | ENDSWITH | MATCHES | GLOB) rhs=expr  # stringOpExpr
    | NOT expr                                             # notExpr
    | lhs=expr AND rhs=expr                                # andExpr
    | lhs=expr OR rhs=expr                                 # orExpr
    ;

setLiteral
    : LBRACE (setElement (COMMA setElement)* COMMA?)? RBRACE
    ;

setElement
    : literal
    | IDENT
    ;

fieldPath
    : IDENT (DOT IDENT)*
    ;

literal
    : STRING                                               # stringLiteral
    | MINUS? INT                                           # intLiteral
    | (TRUE | FALSE)                                       # boolLiteral
    ;

// ---------------------------------------------------------------- lexer

GUARDPOLICY : 'guardpolicy' ;
UNSAFE      : 'unsafe' ;
POLICY      : 'policy' ;
EXTENDS     : 'extends' ;
DOC         : 'doc' ;
KEEP        : 'keep' ;
DROP        : 'drop' ;
WATCH       : 'watch' ;
WHEN        : 'when' ;
DEFAULT     : 'default' ;
USE         : 'use' ;
CONFIG      : 'config' ;
STANCE      : 'stance' ;
AFTER       : 'after' ;
CALLS       : 'calls' ;
ON_ERROR    : 'on_error' ;
VERIFY      : 'verify' ;
EVERY       : 'every' ;
ON_VIOLATION: 'on_violation' ;
ON_RECOMPILE: 'on_recompile' ;
DISPATCH    : 'dispatch' ;
TEST        : 'test' ;
EXPECT      : 'expect' ;
AND         : 'and' ;
OR          : 'or' ;
NOT         : 'not' ;
IN          : 'in' ;
CONTAINS    : 'contains' ;
STARTSWITH  : 'startswith' ;
ENDSWITH    : 'endswith' ;
MATCHES     : 'matches' ;
GLOB        : 'glob' ;
TRUE        : 'true' ;
FALSE       : 'false' ;

EQ     : '==' ;
NE     : '!=' ;
LE     : '<=' ;
GE     : '>=' ;
LT     : '<' ;
GT     : '>' ;
ASSIGN : '=' ;
LPAREN : '(' ;
RPAREN : ')' ;
LBRACE : '{' ;
RBRACE : '}' ;
COMMA  : ',' ;
COLON  : ':' ;
DOT    : '.' ;
MINUS  : '-' ;

IDENT  : [a-zA-Z_] [a-zA-Z_0-9]* ;
INT    : [0-9]+ ;
STRING : '"' ( '\\' . | ~["\\\r\n] )* '"' ;

COMMENT : '#' ~[\r\n]* -> channel(HIDDEN) ;
WS      : [ \t\r\n]+ -> skip ;
// Any other character is one token the parser rejects with a located diagnostic.
ERROR_CHAR : . ;
