import Foundation

// Core Data's names, for code written against Apple's platforms: each is unavailable and renamed,
// so the compiler offers Concord's name as a fix-it. (Linux Foundation declares none of them.)

/// Core Data's name for ``StoreCoordinator``.
@available(*, unavailable, renamed: "StoreCoordinator")
public typealias NSPersistentStoreCoordinator = StoreCoordinator

/// Core Data's name for ``ObjectContext``.
@available(*, unavailable, renamed: "ObjectContext")
public typealias NSManagedObjectContext = ObjectContext

/// Core Data's name for ``Schema``.
@available(*, unavailable, renamed: "Schema")
public typealias NSManagedObjectModel = Schema

/// Core Data's name for ``Record`` (a value, not a live object: change it and pass it to
/// ``ObjectContext/update(_:)``).
@available(*, unavailable, renamed: "Record")
public typealias NSManagedObject = Record

/// Core Data's name for ``ObjectID``.
@available(*, unavailable, renamed: "ObjectID")
public typealias NSManagedObjectID = ObjectID

/// Core Data's name for ``EntityDescription``.
@available(*, unavailable, renamed: "EntityDescription")
public typealias NSEntityDescription = EntityDescription

/// Core Data's name for ``AttributeDescription``.
@available(*, unavailable, renamed: "AttributeDescription")
public typealias NSAttributeDescription = AttributeDescription

/// Core Data's name for ``RelationshipDescription``.
@available(*, unavailable, renamed: "RelationshipDescription")
public typealias NSRelationshipDescription = RelationshipDescription

/// Core Data's name for ``FetchRequest``.
@available(*, unavailable, renamed: "FetchRequest")
public typealias NSFetchRequest = FetchRequest

/// Core Data's name for ``PersistentStore``.
@available(*, unavailable, renamed: "PersistentStore")
public typealias NSPersistentStore = PersistentStore

/// Core Data's name for ``MergePolicy``.
@available(*, unavailable, renamed: "MergePolicy")
public typealias NSMergePolicy = MergePolicy

/// Core Data's container has no single counterpart in Concord.
@available(
    *,
    unavailable,
    message:
        "Concord has no container type: make a StoreCoordinator(schema:), call addStore(ofType:at:) on it, and create ObjectContext(coordinator:) for each context"
)
public enum NSPersistentContainer {}

extension StoreCoordinator {
    /// Core Data's name for ``addStore(ofType:at:options:entities:)``.
    @available(*, unavailable, renamed: "addStore(ofType:at:options:entities:)")
    @discardableResult
    public func addPersistentStore(
        ofType storeType: String,
        configurationName configuration: String?,
        at storeURL: URL?,
        options: [AnyHashable: Any]?
    ) throws -> any PersistentStore { fatalError("unavailable") }

    /// Core Data's name for ``addStore(ofType:at:options:entities:)``.
    @available(*, unavailable, renamed: "addStore(ofType:at:)")
    @discardableResult
    public func addPersistentStore(ofType storeType: String, at storeURL: URL) throws -> any PersistentStore {
        fatalError("unavailable")
    }
}

extension ObjectContext {
    /// Core Data's name for ``record(with:)``.
    @available(*, unavailable, renamed: "record(with:)")
    public func existingObject(with objectID: ObjectID) throws -> Record? { fatalError("unavailable") }

    /// Core Data's name for ``record(with:)`` (which returns `nil` rather than a fault).
    @available(*, unavailable, renamed: "record(with:)")
    public func object(with objectID: ObjectID) -> Record { fatalError("unavailable") }
}
