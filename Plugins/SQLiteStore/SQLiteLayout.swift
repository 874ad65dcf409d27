// How an SQLite store lays out its records.
//
// One database file (plus SQLite's `-wal` and `-shm` companions; the store runs in WAL mode with
// `synchronous=FULL`, so a returned commit is on disk).
//
// - `concord_metadata (key TEXT PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID`: the store's own keys
//   `store.identifier` (the UUID string), `store.schemaVersion` (decimal), `store.schema` (the
//   JSON of `Schema`, sorted keys), `store.integrityChecked` (when the last full integrity check
//   at open passed, or the store was created: seconds since 1970, decimal), and every
//   `StoreMetadata.entries` entry under `entry.<key>`. The prefixes keep the owners' keys (which may start with `concord.`) apart
//   from the store's. Made `WITHOUT ROWID` after 0.1.0 (one B-tree in key order: a commit that
//   rewrites neighbouring keys, as a synced save does, writes one page for them, not one in the
//   rowid table and one per key in its index). A store made earlier keeps its rowid table: every
//   statement reads and writes both alike.
// - One table per entity, named after the entity, `WITHOUT ROWID`, whose primary key
//   `id BLOB` holds the record's 16 UUID bytes (the entity is implied by the table). A
//   clustered primary key keeps rows in id order: a fetch's final `ORDER BY id` and the paging
//   of `enumerateRecords` (`id > ?`) cost nothing, and the rows are not stored twice (a rowid
//   table would need a second B-tree for `id`).
// - One column per attribute, named after it: string TEXT, integer INTEGER, boolean INTEGER
//   0/1, data BLOB, uuid BLOB (16 bytes); double and date hold REAL values (a date as
//   `timeIntervalSinceReferenceDate`, the `Double` a `Date` holds, so it round-trips exactly)
//   in a column declared without a type: a REAL-affinity column stores integral values as
//   integers and gives -0.0 back as 0.0, an untyped one keeps the 8-byte double. NaN, which
//   SQLite turns into NULL, is stored as the 8 bytes of its bit pattern (a BLOB, which SQLite
//   orders after every number, as `Value.compare` orders NaN). `null` is SQL NULL.
// - One BLOB column per to-one relationship holding the target's 16 UUID bytes (the target
//   entity is the relationship's destination), indexed.
// - One BLOB column per to-many relationship holding the targets' 16-byte UUIDs sorted and
//   concatenated; NULL when empty. Chosen over a join table because a `Record` carries the
//   whole set: one row read, one row written, no join and no per-target row on the insert
//   path that the benchmarks measure. The cost: "holds X" (`Field("tags").refers(to: x)`) runs
//   the SQL function `concord_holds_id(blob, id)` over each candidate row instead of an index
//   lookup.
// - Indexes: every to-one column (`<entity>_<relationship>_index`), every attribute with
//   `isIndexed`, and every attribute named in the `indexes` store setting
//   (`"Note.title,Note.created"`), each `<entity>_<attribute>_index`. An index missing from an
//   existing store (an attribute indexed since) is created when the store opens.
//
// Identifiers are always double-quoted. SQLite compares names case-insensitively, so a schema
// whose entity names (or the property names of one entity, or a property and `id`) differ only
// by case, or an entity named `concord_metadata` or `sqlite_*`, cannot be laid out; opening
// one throws `invalidRequest`.
//
// Migration (older schema version on disk): one transaction adds tables and columns (existing
// rows get the attribute's default), drops the columns and tables of removed properties and
// entities (their data is gone, as `SchemaMigration` says; dropping them also lets a later
// version add a property of the same name with another type), and records the new schema.
import Foundation
import Persistence

// GRDB has types of these names too; in this module they are Persistence's.
typealias PersistenceError = Persistence.PersistenceError
typealias Record = Persistence.Record
typealias FetchRequest = Persistence.FetchRequest

/// Double-quotes an SQL identifier.
func quoted(_ identifier: String) -> String {
    "\"" + identifier.replacingOccurrences(of: "\"", with: "\"\"") + "\""
}

/// One column of an entity table (after `id`).
struct ColumnLayout: Sendable {
    enum Kind: Sendable, Hashable {
        case attribute(AttributeType)
        case toOne(destination: String)
        case toMany(destination: String)
    }

    let name: String
    let quotedName: String
    let kind: Kind

    var sqlType: String {
        switch kind {
        case .attribute(.string): return "TEXT"
        case .attribute(.integer), .attribute(.boolean): return "INTEGER"
        case .attribute(.double), .attribute(.date): return ""  // REAL values, no affinity (see above)
        case .attribute(.data), .attribute(.uuid), .toOne, .toMany: return "BLOB"
        }
    }

    var definition: String { sqlType.isEmpty ? quotedName : "\(quotedName) \(sqlType)" }
}

/// How one entity is stored.
struct EntityLayout: Sendable {
    let entity: EntityDescription
    let quotedTable: String
    /// Attributes first (in schema order), then relationships.
    let columns: [ColumnLayout]
    let attributeCount: Int
    let toOneCount: Int
    let toManyCount: Int
    let columnIndex: [String: Int]
    /// `"id", "a", "b", ...`
    let selectList: String
    let insertSQL: String
    let deleteSQL: String
    let indexedAttributes: [String]

    init(_ entity: EntityDescription, indexedAttributes: [String]) {
        self.entity = entity
        quotedTable = quoted(entity.name)
        var columns = entity.attributes.map {
            ColumnLayout(name: $0.name, quotedName: quoted($0.name), kind: .attribute($0.type))
        }
        columns += entity.relationships.map {
            ColumnLayout(
                name: $0.name,
                quotedName: quoted($0.name),
                kind: $0.isToMany ? .toMany(destination: $0.destination) : .toOne(destination: $0.destination)
            )
        }
        self.columns = columns
        attributeCount = entity.attributes.count
        toOneCount = entity.relationships.filter { !$0.isToMany }.count
        toManyCount = entity.relationships.count - toOneCount
        columnIndex = Dictionary(uniqueKeysWithValues: columns.enumerated().map { ($1.name, $0) })
        selectList = (["id"] + columns.map(\.quotedName)).joined(separator: ", ")
        insertSQL =
            "INSERT OR REPLACE INTO \(quotedTable) (\(selectList)) VALUES ("
            + Array(repeating: "?", count: columns.count + 1).joined(separator: ", ") + ")"
        deleteSQL = "DELETE FROM \(quotedTable) WHERE id = ?"
        self.indexedAttributes = indexedAttributes
    }

    func column(_ name: String) -> ColumnLayout? { columnIndex[name].map { columns[$0] } }

    func indexName(_ property: String) -> String { quoted("\(entity.name)_\(property)_index") }

    /// The statements that create the table and its indexes.
    var createStatements: [String] {
        var statements = [
            "CREATE TABLE \(quotedTable) (id BLOB PRIMARY KEY NOT NULL"
                + columns.map { ", " + $0.definition }.joined() + ") WITHOUT ROWID"
        ]
        for column in columns {
            if case .toOne = column.kind { statements.append(createIndex(column.name)) }
        }
        for name in indexedAttributes { statements.append(createIndex(name)) }
        return statements
    }

    func createIndex(_ property: String) -> String {
        "CREATE INDEX IF NOT EXISTS \(indexName(property)) ON \(quotedTable)(\(quoted(property)))"
    }
}

/// How a whole schema is stored.
struct StoreLayout: Sendable {
    let schema: Schema
    let entities: [String: EntityLayout]

    static let metadataTable = "concord_metadata"

    /// The layout of `schema`; `indexSetting` is the `indexes` store setting.
    init(schema: Schema, indexSetting: String?, url: URL) throws(PersistenceError) {
        self.schema = schema
        var indexed: [String: [String]] = [:]
        for item in (indexSetting ?? "").split(separator: ",") {
            let parts = item.trimmingCharacters(in: .whitespaces).split(separator: ".", maxSplits: 1).map(String.init)
            guard parts.count == 2, let entity = schema.entity(parts[0]), entity.attribute(parts[1]) != nil else {
                throw PersistenceError(
                    .invalidRequest,
                    "the indexes setting names \(item), which is not an attribute of the schema",
                    url: url
                )
            }
            if !(indexed[parts[0]]?.contains(parts[1]) ?? false) { indexed[parts[0], default: []].append(parts[1]) }
        }
        for entity in schema.entities {
            for attribute in entity.attributes
            where attribute.isIndexed && !(indexed[entity.name]?.contains(attribute.name) ?? false) {
                indexed[entity.name, default: []].append(attribute.name)
            }
        }
        var tables = Set<String>()
        var entities: [String: EntityLayout] = [:]
        for entity in schema.entities {
            let folded = entity.name.lowercased()
            guard tables.insert(folded).inserted, folded != Self.metadataTable, !folded.hasPrefix("sqlite_") else {
                throw PersistenceError(
                    .invalidRequest,
                    "the SQLite store cannot hold entity \(entity.name): its name is reserved or differs from another only by case",
                    url: url
                )
            }
            var columns: Set<String> = ["id"]
            for name in entity.attributes.map(\.name) + entity.relationships.map(\.name) {
                guard columns.insert(name.lowercased()).inserted else {
                    throw PersistenceError(
                        .invalidRequest,
                        "the SQLite store cannot hold \(entity.name).\(name): the name is id or differs from another property's only by case",
                        url: url
                    )
                }
            }
            entities[entity.name] = EntityLayout(entity, indexedAttributes: indexed[entity.name] ?? [])
        }
        self.entities = entities
    }

    /// The statements that create an empty store (without its metadata rows).
    var createStatements: [String] {
        ["CREATE TABLE \(Self.metadataTable) (key TEXT PRIMARY KEY NOT NULL, value BLOB NOT NULL) WITHOUT ROWID"]
            + schema.entities.flatMap { entities[$0.name]!.createStatements }
    }

    /// The statements that turn a store laid out for `migration.source` into one for this
    /// layout's schema, with the bindings each needs (the default filled into old rows).
    func migrationStatements(_ migration: SchemaMigration) -> [(String, [SQLiteBinding])] {
        var statements: [(String, [SQLiteBinding])] = []
        for name in migration.removedEntities { statements.append(("DROP TABLE IF EXISTS \(quoted(name))", [])) }
        for entity in migration.addedEntities {
            statements += entities[entity.name]!.createStatements.map { ($0, []) }
        }
        for (entityName, names) in migration.removedAttributes.sorted(by: { $0.key < $1.key }) {
            let old = EntityLayout(migration.source.entity(entityName)!, indexedAttributes: [])
            for name in names {
                statements.append(("DROP INDEX IF EXISTS \(old.indexName(name))", []))
                statements.append(("ALTER TABLE \(old.quotedTable) DROP COLUMN \(quoted(name))", []))
            }
        }
        for (entityName, names) in migration.removedRelationships.sorted(by: { $0.key < $1.key }) {
            let old = EntityLayout(migration.source.entity(entityName)!, indexedAttributes: [])
            for name in names {
                statements.append(("DROP INDEX IF EXISTS \(old.indexName(name))", []))
                statements.append(("ALTER TABLE \(old.quotedTable) DROP COLUMN \(quoted(name))", []))
            }
        }
        for (entityName, attributes) in migration.addedAttributes.sorted(by: { $0.key < $1.key }) {
            let layout = entities[entityName]!
            for attribute in attributes {
                let column = layout.column(attribute.name)!
                statements.append(("ALTER TABLE \(layout.quotedTable) ADD COLUMN \(column.definition)", []))
                if let value = attribute.defaultValue, value != .null {
                    statements.append(
                        (
                            "UPDATE \(layout.quotedTable) SET \(column.quotedName) = ? WHERE \(column.quotedName) IS NULL",
                            [SQLiteBinding(value, as: attribute.type)]
                        )
                    )
                }
            }
        }
        for (entityName, relationships) in migration.addedRelationships.sorted(by: { $0.key < $1.key }) {
            let layout = entities[entityName]!
            for relationship in relationships {
                let column = layout.column(relationship.name)!
                statements.append(("ALTER TABLE \(layout.quotedTable) ADD COLUMN \(column.definition)", []))
                if !relationship.isToMany { statements.append((layout.createIndex(relationship.name), [])) }
            }
        }
        return statements
    }
}
